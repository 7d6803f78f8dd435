"""The store's processes: who holds it (``holders``), generation identity and capture
(``generation``), the checkpoint lock, and the live-writer gate in front of maintenance
(``writer_gate``)."""
