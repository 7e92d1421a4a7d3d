"""Pages for reviewers, auditors and admins. One module per page family; loading an
object and checking its project's permission happens in ``access``."""
