"""Moving agents between databases: `export` and `import` as JSON Lines."""
