"""The one stream of events every operation emits: what started (who, what, from which
source), the plan, each step, the waits, and the outcome. Every output renders from it —
the command line's text and JSON, the notifications, a dashboard — so what one of them says
can never disagree with another (DESIGN.md, invariant 18).

Below the engine: the engine emits, the command line and the notifier subscribe
(:class:`~shipway.events.sink.Sink`).
"""
