"""The worker: counts the notes once in a while (a stand-in for a job queue's consumer)."""

import os
import time

import store

INTERVAL = float(os.environ.get("WORKER_INTERVAL", "5"))

store.migrate()
while True:
    print(f"worker: {len(store.notes())} notes", flush=True)
    time.sleep(INTERVAL)
