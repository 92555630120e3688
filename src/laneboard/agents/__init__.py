"""Agent adapters: one module per agent kind behind one protocol (see ``base``)."""
