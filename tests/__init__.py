"""Tests for kdraexp."""
