"""Pure rules of the board: records, the status machine, claims, authority, weights.

Nothing in this package performs I/O or imports the store.
"""
