"""The supervisor: clocks, passes, the dispatch queue and the session pool."""
