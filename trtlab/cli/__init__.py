"""`python -m trtlab <command>`."""
