"""The ``laneboard`` / ``lb`` command line: parse, call a service, render."""
