"""Helpers shared by the test suite: the tolerance policy (``tolerance``), the one torchrun launcher
(``multiproc``) and the margin recorder for float-fed discrete choices (``margins``).  See tests/README.md."""
