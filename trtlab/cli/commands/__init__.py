"""One module per command; each has `main(argv) -> exit status`."""
