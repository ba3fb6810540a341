"""The build phase of a release: first, before anything new starts (invariant 10).

At plan time the backend says what a build would make and from which inputs (a content
digest), without building anything: the plan's first step is then ``build …`` or, when the
same inputs were built before, ``reuse …``. The image's content-addressed tag is known at
plan time; its digest is known only once it is pushed. So the release is rendered with the
tag, and when the build step has run, the built image's digest and the metadata read from
the image itself are substituted into the release and the artifact re-rendered — before
any unit is applied, so nothing ever runs by a tag. The pending record is rewritten then,
so even an interrupted deploy records what was built.

What must never happen: a unit applied before the build finished; a failed build that
starts anything (it is a failed step like any other: the anchor is re-asserted, nothing new
ran, the outcome is rolled-back or no-anchor); a rebuild for inputs already built; a secret
in the build's log excerpt (the walker masks every failure).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from shipway.backends.protocol import BuildInputs, Built, MaskingReporter, ResolvedImage
from shipway.engine.done import Done
from shipway.engine.telling import Telling, reachable_secrets
from shipway.engine.walk import Builder
from shipway.errors import InputError
from shipway.guard import Clearance
from shipway.plan.model import Build, Plan
from shipway.release.model import BuildRecord, ImageMeta, Release
from shipway.spec.model import App, Target
from shipway.spec.secrets import Masker, Secret


def refuse_source_build(slot_name: str) -> InputError:
    """Why a slot whose objects come from a source (the team's manifests or a chart) is
    not built: its images are the team's, named in the source or given with --image."""
    return InputError(
        f"--build builds the image of shipway's own processes, and slot "
        f"{slot_name!r} takes its objects from a source (hint: build and push "
        "the image yourself, then deploy --image REF; the source's "
        "image_containers take it)"
    )


def builds_its_image(app: App) -> bool:
    """Whether shipway builds this app's image: its Dockerfile is in the app's directory
    (a deploy without --build then runs what was built and pushed before)."""
    return (app.source_dir / app.build.dockerfile).is_file()


def build_step(inputs: BuildInputs) -> Build:
    return Build(
        kind=inputs.kind,
        what=inputs.what,
        inputs=inputs.inputs,
        source=inputs.source,
        reuse=inputs.reuse,
    )


def with_build(plan: Plan, inputs: BuildInputs | None) -> Plan:
    """The plan with the build phase as its first step (pure)."""
    if inputs is None:
        return plan
    return replace(plan, steps=(build_step(inputs), *plan.steps))


def planned(inputs: BuildInputs) -> BuildRecord:
    """The build record a plan renders with: what will be built (an environment's
    directory is known before it is built), its result once known."""
    return BuildRecord(
        kind=inputs.kind,
        what=inputs.what,
        inputs=inputs.inputs,
        result=inputs.digest or "",
        source=inputs.source,
        reused=inputs.reuse,
    )


def record_of(built: Built) -> BuildRecord:
    return BuildRecord(
        kind=built.kind,
        what=built.what,
        inputs=built.inputs,
        result=built.result,
        source=built.source,
        reused=built.reused,
        duration=built.duration,
    )


class BuildPhase(Telling):
    """Planning the build phase, and running it as the walk's first step; a build alone."""

    def build_only(self, clearance: Clearance, app: App, slot_name: str) -> Built:
        """Build what a deploy of the slot would run (``shipway build``) — an image pushed
        to its registry, a local dependency environment — without deploying it; told as an
        operation. The slot is not locked: nothing in it changes. What the build streams is
        masked with the secrets that resolve here."""
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        if app.slots.get(slot_name).source is not None:
            raise refuse_source_build(slot_name)
        view = app.in_slot(slot_name)
        secrets = reachable_secrets(app, self.environ)
        masked = MaskingReporter(self.reporter, Masker.of(secrets))
        inputs = self.backend.build_inputs(target, view, None, True)
        if inputs is None:
            raise InputError(f"nothing to build for {target} on the {self.backend.name} backend")
        what = f"build {inputs.kind} {inputs.what}"
        with self._telling(clearance, target, app, "build", what, secrets):
            built = self.backend.build(clearance, target, view, inputs, masked)
            verb = "reused (same inputs)" if built.reused else f"built in {built.duration:.1f}s"
            more = []
            if built.meta is not None:
                m = built.meta
                port = f", exposes {m.exposed_port}" if m.exposed_port else ""
                more.append(f"{m.source_type} image, working dir {m.working_dir or '/'}{port}")
            doc = {
                "slot": slot_name,
                "kind": built.kind,
                "what": built.what,
                "inputs": built.inputs,
                "result": built.result,
                "reused": built.reused,
                "duration": round(built.duration, 3),
                "image_meta": built.meta.to_json() if built.meta else None,
            }
            line = f"{built.kind} {built.what} {verb}: {built.result}"
            self._done(Done("build", str(target), line, doc, tuple(more)))
            return built

    def _build_inputs(
        self, target: Target, app: App, image: str | None, build: bool
    ) -> BuildInputs | None:
        """What this deploy builds. ``build``: an image build was asked for (--build)."""
        if build and image is not None:
            raise InputError(
                "--build builds the image from the app's source; it takes no --image "
                "(hint: drop one of the two)"
            )
        # an explicit image (--image, a promotion) is deployed as it is: never rebuilt
        inputs = self.backend.build_inputs(target, app, image, build)
        if build and inputs is None:
            raise InputError(
                f"nothing to build for {target} on the {self.backend.name} backend "
                "(hint: deploy without --build)"
            )
        return inputs

    @staticmethod
    def _planned_image(app: App, inputs: BuildInputs) -> ResolvedImage:
        """The image a build will make, as the plan renders it: its content-addressed tag,
        with its digest and metadata when it was built before; otherwise the metadata is
        provisional (the type the spec declares, else ``dockerfile``) until the image is
        built and read."""
        meta = inputs.meta or ImageMeta(source_type=app.image_type or "dockerfile")
        return ResolvedImage(inputs.what, inputs.digest, meta)

    def _builder(
        self, clearance: Clearance, target: Target, app: App, secrets: Mapping[str, Secret]
    ) -> Builder:
        """Runs a plan's build step: builds (or confirms the reused artifact), then gives
        the release what was built. What the build streams is masked (a RUN step may echo
        anything)."""
        view = app.in_slot(target.slot)
        slot = app.slots.get(target.slot)
        reporter = MaskingReporter(self.reporter, Masker.of(secrets))

        def run(step: Build, release: Release) -> Release:
            inputs = BuildInputs(
                kind="image" if step.kind == "image" else "environment",
                what=step.what,
                inputs=step.inputs,
                source=step.source,
                reuse=step.reuse,
            )
            built = self.backend.build(clearance, target, view, inputs, reporter)
            record = record_of(built)
            new = replace(release, build=record)
            if built.kind == "image":
                new = replace(
                    new,
                    image=built.what,
                    digest=built.result,
                    image_meta=built.meta or release.image_meta,
                )
                if (new.image, new.digest, new.image_meta) != (
                    release.image,
                    release.digest,
                    release.image_meta,
                ):
                    new = replace(new, artifact=self.backend.render(view, slot, new))
            self.backend.write_records(clearance, target, [new])
            self.reporter.line(f"  {record.describe()}")
            return new

        return run
