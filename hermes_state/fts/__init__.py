"""Full-text search upkeep: background back-fill, the layout switch (``optimize-storage``),
repair of a damaged index, and the query sanitiser."""
