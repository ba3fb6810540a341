"""The release command: put the schema in place (idempotent), before any new web starts
taking requests."""

import store

store.migrate()
print("schema ready")
