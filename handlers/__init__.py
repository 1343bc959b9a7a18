"""One module per trigger: plain synchronous functions (connection, request, now) -> reply."""
