"""The file-backed reference adapter: deliberately small, boring and correct."""
