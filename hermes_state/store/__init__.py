"""A connection to the store: open (``opening``) -> migrate (``migrations``) -> the write path
(``connection``) -> close, with its pragmas, quarantine and generation checks."""
