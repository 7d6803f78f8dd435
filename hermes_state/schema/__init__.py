"""The schema: version 23's tables (``tables``), every historical version (``history``), the FTS
inventory and layout, and what an open still has to do to a store (``shape``)."""
