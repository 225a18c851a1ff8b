"""The example zoo's tests (the ``slow`` switch lives in the top-level tests/conftest.py)."""
