"""Workspaces: where a card's agent runs (its lane), and the files it reads there."""
