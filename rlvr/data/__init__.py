"""Rows, the data contract and the tasks that generate rows."""
