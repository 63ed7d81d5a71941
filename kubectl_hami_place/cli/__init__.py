"""The kubectl plugin: one module per verb, wired by app.py."""
