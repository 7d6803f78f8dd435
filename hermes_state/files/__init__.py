"""Files beside the store: every name (``paths``), safe creation and reading (``atomic``)."""
