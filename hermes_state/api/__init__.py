"""The verbs of ``SessionDB``, one module per noun (sessions, messages, titles, usage, search...),
each a mixin or helpers over a :class:`~hermes_state.store.connection.StoreConnection`."""
