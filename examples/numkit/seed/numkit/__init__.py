"""numkit: small number utilities, one module each."""
