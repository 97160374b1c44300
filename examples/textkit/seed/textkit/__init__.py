"""textkit: small text utilities, one module each."""
