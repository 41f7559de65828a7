"""Release and build helpers (importable so that tests can call check_release)."""
