"""hello's worker: a background process with no port. It prints a heartbeat."""

import os
import time

RELEASE = os.environ.get("SHIPWAY_RELEASE", "dev")

if __name__ == "__main__":
    beat = 0
    while True:
        print(f"worker {RELEASE} heartbeat {beat}", flush=True)
        beat += 1
        time.sleep(5)
