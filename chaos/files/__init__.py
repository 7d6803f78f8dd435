"""The toolkit's own files (issue 22 item 4): which names may become paths (:mod:`.names`), how
an input file is read (:mod:`.inputs`: no link, no FIFO, a bound), and which directories a
command may remove (:mod:`.owned`: only those it created). Standard library only."""
