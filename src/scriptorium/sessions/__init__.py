"""The DAG session store (see store.py)."""
