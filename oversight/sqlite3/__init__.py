"""SQLite as Django's backend, with the web's writes going before the workers' claims
(``writes``)."""
