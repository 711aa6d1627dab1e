"""The `maxkernel` command: its verbs, the shared grammar every CLI uses, rendering and live progress."""
