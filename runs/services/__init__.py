"""Services: the plain functions that agents' API calls, pages and commands use to
change state. Keyword arguments, short transactions, side effects after commit."""
