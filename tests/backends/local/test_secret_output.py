"""A secret of three characters is masked in everything shipway shows — the deploy's
output, the release command's output, a failure's log excerpt, ``shipway logs`` — and the
logs shipway keeps are private (0600 files in a 0700 directory)."""

from __future__ import annotations

import stat

from tests.backends.local.conftest import Slot

SHORT = "q7z"


def printing_its_token(slot: Slot) -> None:
    """The app prints its secret TOKEN (a 3-character value) as it starts, and crashes
    saying it again when CRASH is set."""
    app_py = slot.app_dir / "app.py"
    app_py.write_text(
        app_py.read_text().replace(
            "\nclass Handler",
            '\nprint("starting with token", os.environ.get("TOKEN"), flush=True)\n'
            'if os.environ.get("CRASH"):\n'
            '    raise SystemExit(f"crashing with token {os.environ.get(\'TOKEN\')}")\n'
            "\nclass Handler",
            1,
        )
    )
    slot.edit_spec("[env]", '[secrets]\nTOKEN = { from_env = "HELLO_TOKEN" }\n\n[env]')
    slot.env["HELLO_TOKEN"] = SHORT


def test_a_three_character_secret_is_masked_everywhere_and_the_logs_are_private(
    slot: Slot,
) -> None:
    printing_its_token(slot)
    slot.edit_spec(
        'name = "hello"\n',
        'name = "hello"\nrelease_command = ["sh", "-c", "echo migrating with $TOKEN"]\n',
    )

    r = slot.deploy()
    assert "release | migrating with ***" in r.out, r.text
    assert SHORT not in r.text

    logs = slot.run("logs", "local", "web")
    assert logs.code == 0, logs.text
    assert "starting with token ***" in logs.out, logs.text
    assert SHORT not in logs.text

    # a release that crashes shows its log's last lines: masked too
    slot.edit_spec('GREETING = "hello"', 'GREETING = "hello"\nCRASH = "1"')
    failed = slot.deploy(expect=10)
    assert "crashing with token ***" in failed.out, failed.text
    assert SHORT not in failed.text

    kept = slot.state / "hello" / "local" / "logs"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o700
    files = sorted(kept.iterdir())
    assert any(f.name.startswith("_release-r") for f in files)
    assert any(f.name.startswith("web.") for f in files)
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    assert any(SHORT in f.read_text() for f in files)  # the files hold what was printed


def test_logs_of_a_stopped_slot_mask_the_secret_without_it_in_the_environment(
    slot: Slot,
) -> None:
    printing_its_token(slot)
    slot.deploy()
    assert slot.run("stop", "local").code == 0
    del slot.env["HELLO_TOKEN"]  # whoever reads the logs need not have the secret
    logs = slot.run("logs", "local", "web")
    assert logs.code == 0, logs.text
    assert "starting with token ***" in logs.out, logs.text
    assert SHORT not in logs.text
