"""The rebuild: every timeline recomputed from the changelogs into a new
generation, verified, handed to the fanout job (docs/rebuild.md)."""
