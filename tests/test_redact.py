"""Secrets never leave logsleuth: not in any report format, annotation, summary, export or store."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from logsleuth import analyze
from logsleuth.cli import app
from logsleuth.redact import MASK, redact, redact_all, redact_expr, redact_frame
from logsleuth.report.model import CandidateOut, FirstFailure, Report, Verdict

from .conftest import ROOT

runner = CliRunner()
#: A real torchrun run whose rank 1 names a URL with its (fake) Hugging Face token on
#: the line that proves the failure; rank 0 printed the token in its config too.
SECRET_JOB = ROOT / "tests" / "fixtures" / "torchrun-secret" / "train.log"
TOKEN = "hf_FakeTokenForTestsOnly0123456789abcd"

CASES = [
    ("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123", "HF_TOKEN=[REDACTED]"),
    ("export WANDB_API_KEY='0123456789abcdef0123456789abcdef01234567'", "export WANDB_API_KEY='[REDACTED]'"),
    ("AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE", "AWS_ACCESS_KEY_ID=[REDACTED]"),
    ("key AKIAIOSFODNN7EXAMPLE in use", "key [REDACTED] in use"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY=[REDACTED]"),
    ("Authorization: Bearer abcdefghijklmnop.qrstuv", "Authorization: Bearer [REDACTED]"),
    ("sent bearer eyJhbGciOiJIUzI1NiJ9abc to the hub", "sent bearer [REDACTED] to the hub"),
    ("git clone https://alice:s3cr3t-pass@github.com/org/repo.git", "git clone https://alice:[REDACTED]@github.com/org/repo.git"),
    ("python train.py --password hunter2 --lr 0.1", "python train.py --password [REDACTED] --lr 0.1"),
    ("python train.py --hf-token=abc123 --db_password xyz", "python train.py --hf-token=[REDACTED] --db_password [REDACTED]"),
    ('{"api_key": "abcd1234", "user": "bob"}', '{"api_key": "[REDACTED]", "user": "bob"}'),
    ("{'hf_token': 'xyz', 'clientSecret': 'qq'}", "{'hf_token': '[REDACTED]', 'clientSecret': '[REDACTED]'}"),
    ("wandb login 0123456789abcdef0123456789abcdef01234567", "wandb login [REDACTED]"),
    ("pushed with ghp_abcdefghijklmnopqrstuvwxyz0123456789AB", "pushed with [REDACTED]"),
]
#: Lines that look a little like secrets and must stay as they are.
KEPT = [
    "TOKENIZERS_PARALLELISM=false",
    "generate(max_tokens=512, num_tokens: 12)",
    "python train.py --tokenizer gpt2 --token-file /run/secrets/hf --max-tokens 4096",
    "NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
    "AuthType=auth/munge",
]


@pytest.mark.parametrize(("text", "want"), CASES, ids=[c[0][:30] for c in CASES])
def test_secret_is_masked_and_the_rest_of_the_line_kept(text: str, want: str) -> None:
    assert redact(text) == want


@pytest.mark.parametrize("text", KEPT)
def test_lookalikes_are_not_masked(text: str) -> None:
    assert redact(text) == text


def test_polars_and_python_engines_agree_and_redacting_twice_changes_nothing() -> None:
    texts = [t for t, _ in CASES] + KEPT
    vectorised = pl.DataFrame({"t": texts}).select(redact_expr(pl.col("t"))).to_series().to_list()
    assert vectorised == [redact(t) for t in texts]
    assert [redact(v) for v in vectorised] == vectorised


def test_redact_all_reaches_notes_and_nested_fields() -> None:
    verdict = Verdict("unknown", "unknown", 0.0, FirstFailure(), [], f"failed with token={TOKEN}", [f"rotate {TOKEN}"])
    report = Report(verdict, [CandidateOut("unknown", "unknown", 0.0)], [], notes=[f"internal error: bad line HF_TOKEN={TOKEN}"])
    clean = redact_all(report)
    assert TOKEN not in json.dumps(clean.to_dict()) and clean.notes == ["internal error: bad line HF_TOKEN=[REDACTED]"]
    assert TOKEN in report.notes[0]  # the original is left alone


def test_redact_all_on_a_big_report_runs_vectorised_and_masks_the_same() -> None:
    """A 4,096-rank report holds thousands of strings: they are redacted in one polars pass (issue 17),
    with the replacements the Python engine makes one by one."""
    texts = [t for t, _ in CASES] + KEPT + [f"rank {i} on gpu{i:04d}: last line step {i}" for i in range(200)]
    report = {"ranks": [{"note": t, "nested": [t, {"x": t}]} for t in texts], "n": 3}
    clean = redact_all(report)
    assert clean == {"ranks": [{"note": redact(t), "nested": [redact(t), {"x": redact(t)}]} for t in texts], "n": 3}
    quiet = {"ranks": [f"rank {i}" for i in range(100)]}
    assert redact_all(quiet) is quiet  # nothing to mask: no copy made


def test_the_fixture_really_holds_the_secret_on_its_evidence_line() -> None:
    report = analyze([SECRET_JOB], redact=False)
    assert TOKEN in report.verdict.evidence[0].text


@pytest.mark.parametrize("fmt", ["terminal", "json", "markdown", "github"])
def test_every_report_format_masks_the_secret_but_keeps_the_line(fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = runner.invoke(app, ["analyze", str(SECRET_JOB), "--format", fmt, "--no-color"]).stdout
    assert TOKEN not in out and MASK in out
    assert "shard-1.tar?access_token=[REDACTED] failed its checksum" in out
    if fmt == "github":
        assert TOKEN not in summary.read_text() and MASK in summary.read_text()
    unmasked = runner.invoke(app, ["analyze", str(SECRET_JOB), "--format", fmt, "--no-redact", "--no-color"]).stdout
    assert TOKEN in unmasked


def test_report_written_with_output_is_masked(tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    assert runner.invoke(app, ["analyze", str(SECRET_JOB), "-f", "markdown", "-o", str(out)]).exit_code == 0
    assert TOKEN not in out.read_text() and MASK in out.read_text()


@pytest.mark.parametrize("suffix", [None, ".jsonl", ".json", ".csv", ".parquet"])
def test_events_output_and_exports_are_masked(suffix: str | None, tmp_path: Path) -> None:
    if suffix is None:
        text = runner.invoke(app, ["events", str(SECRET_JOB), "--limit", "500"], env={"COLUMNS": "1000"}).stdout
    else:
        path = tmp_path / f"events{suffix}"
        assert runner.invoke(app, ["events", str(SECRET_JOB), "-o", str(path)]).exit_code == 0
        text = pl.read_parquet(path).write_csv() if suffix == ".parquet" else path.read_text()
    assert TOKEN not in text
    assert text.count(MASK) >= 2  # the config line and the evidence line


def test_history_store_is_masked(tmp_path: Path) -> None:
    assert runner.invoke(app, ["analyze", str(SECRET_JOB), "--store", str(tmp_path / "store")]).exit_code == 0
    stored = pl.read_parquet(next((tmp_path / "store").glob("*.parquet")))
    assert TOKEN not in str(stored.to_dicts()) and MASK in stored.item(0, "summary")


# --- the catalogue of secret shapes ----------------------------------------------------------
# Made-up values of the right length and alphabet, drawn at run time from a fixed seed: the
# same on every run, never real, and no literal in this file that a secret scanner could flag.

ALNUM = string.ascii_letters + string.digits
HEX = string.digits + "abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "_-"
_rng = random.Random(18)


def fake(n: int, alphabet: str = ALNUM) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


def shape(id: str, template: str, *secrets: str, kept: str = "") -> Any:
    """A line ``template.format(*secrets)``: every secret must go, ``kept`` (the key name) must stay."""
    return pytest.param(template.format(*secrets), secrets, kept, id=id)


PEM_LINES = ["MIIE" + fake(60, B64), fake(64, B64), fake(64, B64), fake(64, B64), fake(22, B64) + "=="]
SSH_LINES = ["b3BlbnNzaC1rZXktdjEAAAAA" + fake(46, B64), fake(70, B64), fake(70, B64), fake(31, B64) + "="]
AWS_SECRET = fake(40, B64)
AZURE_KEY = fake(86, B64) + "=="
HEX40 = fake(40, HEX)

SHAPES = [
    # Hugging Face
    shape("hf-env", "HF_TOKEN={}", "hf_" + fake(34), kept="HF_TOKEN="),
    shape("hf-cli", "huggingface-cli login --token {} --add-to-git-credential", "hf_" + fake(34), kept="login --token "),
    shape("hf-bare", "401 Client Error for url with hf_{} (expired)", fake(34), kept="401 Client Error"),
    shape("hf-org", "using org token api_org_{}", fake(34), kept="using org token"),
    # OpenAI, Anthropic, Groq, Replicate, NVIDIA
    shape("openai-proj", "OPENAI_API_KEY=sk-proj-{}", fake(48, URLSAFE) + "T3BlbkFJ" + fake(48, URLSAFE), kept="OPENAI_API_KEY="),
    shape("anthropic-kwarg", 'client = Anthropic(api_key="sk-ant-api03-{}-{}AA")', fake(86, URLSAFE), fake(6, URLSAFE), kept='api_key="'),
    shape("anthropic-bare", "auth failed for sk-ant-api03-{}AA", fake(93, URLSAFE), kept="auth failed for"),
    shape("groq", "GROQ key gsk_{}", fake(52), kept="GROQ key"),
    shape("replicate", "REPLICATE_API_TOKEN: r8_{}", fake(37), kept="REPLICATE_API_TOKEN: "),
    shape("replicate-bare", "client(r8_{})", fake(37), kept="client("),
    shape("nvapi", "NIM call with nvapi-{}", fake(64, URLSAFE), kept="NIM call with"),
    shape("ngc-env", "NGC_API_KEY=nvapi-{}", fake(64, URLSAFE), kept="NGC_API_KEY="),
    # AWS
    shape("aws-id", "AWS_ACCESS_KEY_ID=AKIA{}", fake(16, string.ascii_uppercase + string.digits), kept="AWS_ACCESS_KEY_ID="),
    shape("aws-secret-space", "aws_secret_access_key {}", AWS_SECRET, kept="aws_secret_access_key "),
    shape("aws-secret-table", "| aws_secret_access_key | {} |", AWS_SECRET, kept="| aws_secret_access_key |"),
    shape("aws-secret-yaml", "AWS_SECRET_ACCESS_KEY: {}", AWS_SECRET, kept="AWS_SECRET_ACCESS_KEY: "),
    shape("aws-configure", "aws configure set aws_secret_access_key {}", AWS_SECRET, kept="aws_secret_access_key "),
    shape("aws-session", "aws_session_token = IQoJb3JpZ2luX2Vj{}", fake(300, B64), kept="aws_session_token = "),
    shape(
        "s3-presigned",
        "GET https://b.s3.amazonaws.com/x.bin?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20240101T000000Z&X-Amz-Signature={} 403",
        fake(64, HEX),
        kept="&X-Amz-Signature=",
    ),
    # Azure
    shape(
        "azure-conn",
        "AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=https;AccountName=mlruns;AccountKey={};EndpointSuffix=core.windows.net",
        AZURE_KEY,
        kept="AccountKey=",
    ),
    shape(
        "azure-conn-bare",
        "connecting with DefaultEndpointsProtocol=https;AccountName=mlruns;AccountKey={};EndpointSuffix=core.windows.net",
        AZURE_KEY,
        kept="AccountKey=",
    ),
    shape(
        "azure-sas",
        "403 for https://mlruns.blob.core.windows.net/ckpt/step1.pt?sv=2022-11-02&ss=b&srt=o&sp=r&se=2025-01-01T00:00:00Z&spr=https&sig={}",
        fake(30, ALNUM) + "%2B" + fake(10) + "%2F" + fake(5) + "%3D",
        kept="&sig=",
    ),
    shape("azure-client-secret-env", "AZURE_CLIENT_SECRET={}", fake(3) + "8Q~" + fake(34, ALNUM + "_~.-"), kept="AZURE_CLIENT_SECRET="),
    shape(
        "azure-client-secret-bare", "ClientSecretCredential(tenant, client, {})", fake(3) + "8Q~" + fake(34), kept="ClientSecretCredential("
    ),
    shape(
        "azure-servicebus",
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={}",
        fake(43, B64) + "=",
        kept="SharedAccessKey=",
    ),
    shape("azure-apim", "Ocp-Apim-Subscription-Key: {}", fake(32, HEX), kept="Ocp-Apim-Subscription-Key: "),
    # Google
    shape(
        "gcp-service-account",
        '{{"type": "service_account", "private_key_id": "abc", "private_key": "-----BEGIN PRIVATE KEY-----\\n{}\\n{}\\n-----END PRIVATE KEY-----\\n", "client_email": "x@p.iam.gserviceaccount.com"}}',
        PEM_LINES[0],
        PEM_LINES[1],
        kept='"private_key": "',
    ),
    shape("gcp-oauth", "Authorization: Bearer ya29.{}", fake(150, URLSAFE), kept="Authorization: Bearer "),
    shape("gcp-oauth-bare", "refreshed credentials: ya29.{}", fake(150, URLSAFE), kept="refreshed credentials"),
    shape("gcp-client-secret", "client_config secret GOCSPX-{}", fake(28, URLSAFE), kept="client_config secret"),
    shape("google-api-key", "maps request key=AIza{}", fake(35, URLSAFE), kept="maps request key="),
    # private key blocks, whole and line by line
    shape(
        "pem-rsa",
        "-----BEGIN RSA PRIVATE KEY-----\n{}\n{}\n{}\n-----END RSA PRIVATE KEY-----",
        *PEM_LINES[:3],
        kept="-----BEGIN RSA PRIVATE KEY-----",
    ),
    shape(
        "pem-pkcs8",
        "key = '-----BEGIN PRIVATE KEY-----\\n{}\\n{}\\n-----END PRIVATE KEY-----'",
        *PEM_LINES[1:3],
        kept="-----END PRIVATE KEY-----",
    ),
    shape(
        "pem-ec", "-----BEGIN EC PRIVATE KEY-----\n{}\n{}\n-----END EC PRIVATE KEY-----", PEM_LINES[2], PEM_LINES[4], kept="EC PRIVATE KEY"
    ),
    shape(
        "pem-encrypted",
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\n{}\n{}\n-----END ENCRYPTED PRIVATE KEY-----",
        *PEM_LINES[3:],
        kept="ENCRYPTED",
    ),
    shape(
        "pem-dsa", "-----BEGIN DSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n{}\n-----END DSA PRIVATE KEY-----", PEM_LINES[1], kept="DSA"
    ),
    shape("openssh", "-----BEGIN OPENSSH PRIVATE KEY-----\n{}\n{}\n{}\n-----END OPENSSH PRIVATE KEY-----", *SSH_LINES[:3], kept="OPENSSH"),
    shape(
        "pgp", "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{}\n{}\n-----END PGP PRIVATE KEY BLOCK-----", *PEM_LINES[:2], kept="PGP PRIVATE"
    ),
    shape("pem-cut-off", 'echo "-----BEGIN RSA PRIVATE KEY-----\\n{}\\n{}', *PEM_LINES[:2], kept="-----BEGIN RSA PRIVATE KEY-----"),
    shape("pem-line-alone", "{}", PEM_LINES[1]),
    shape("pem-line-first", "{}", PEM_LINES[0]),
    shape("pem-line-torchrun", "[rank0]:{}", PEM_LINES[2], kept="[rank0]:"),
    shape("pem-line-srun", "0: {}", PEM_LINES[3], kept="0: "),
    shape("openssh-line", "[default0]: {}", SSH_LINES[1], kept="[default0]: "),
    # command lines
    shape("flag-quoted-double", 'python train.py --password "{}" --lr 0.1', "correct horse battery", kept="--password "),
    shape("flag-quoted-single", "python train.py --password '{}' --lr 0.1", "staple x y", kept="--password "),
    shape("flag-equals-quoted", 'launch --token="{}" --nodes 2', "tok en " + fake(12), kept="--token="),
    shape("flag-api-key", "deepspeed train.py --wandb-api-key {} --epochs 2", HEX40, kept="--wandb-api-key "),
    shape("mysql-attached", "mysql -u root -p{} -h db.internal ml", "S3cr3t!pw", kept="mysql -u root -p"),
    shape("mysqldump-space", "mysqldump -u root -p {} ml > /tmp/ml.sql", "Hunter2pw", kept="mysqldump -u root -p"),
    shape("sshpass", "sshpass -p '{}' ssh -p 2222 ubuntu@node02", "pw with space", kept="ssh -p 2222 ubuntu@node02"),
    shape("docker-login", "+ docker login -u ci -p {} registry.example.com", "dckr" + fake(20), kept="docker login -u ci -p"),
    shape("curl-user", "+ curl -fsSL -u alice:{} https://artifacts.example.com/ckpt.tar", fake(16), kept="-u alice:"),
    shape("mysql-pwd", "MYSQL_PWD={}", fake(14), kept="MYSQL_PWD="),
    shape("db-pass", "DB_PASS={} python train.py", fake(14), kept="DB_PASS="),
    shape("pgpassword", "export PGPASSWORD='{}'", fake(14), kept="PGPASSWORD="),
    shape("redis-pass", "REDIS_PASS: {}", fake(14), kept="REDIS_PASS: "),
    shape("smtp-pwd", "SMTP_PWD={}", fake(14), kept="SMTP_PWD="),
    shape("odbc", "Driver={{ODBC Driver 18}};Server=db;Uid=sa;Pwd={};Encrypt=yes", fake(16), kept="Pwd="),
    shape("wandb-login-double", 'wandb.login(key="{}")', HEX40, kept="wandb.login(key="),
    shape("wandb-login-single", "    wandb.login(anonymous='never', key='{}')", HEX40, kept="key="),
    shape("wandb-cli", "wandb login --relogin {}", HEX40, kept="wandb login --relogin "),
    shape("wandb-env", "WANDB_API_KEY={}", HEX40, kept="WANDB_API_KEY="),
    # chat, payments, registries, clouds
    shape(
        "slack-app",
        "SLACK_APP={}",
        "xapp-1-A0" + fake(9, string.ascii_uppercase + string.digits) + "-" + fake(13, string.digits) + "-" + fake(64, HEX),
    ),
    shape("slack-app-bare", "socket mode with xapp-1-A0{}-{}-{}", fake(9), fake(13, string.digits), fake(64, HEX), kept="socket mode with"),
    shape("slack-bot", "notify via xoxb-{}-{}-{}", fake(12, string.digits), fake(13, string.digits), fake(24), kept="notify via"),
    shape(
        "slack-webhook",
        "POST https://hooks.slack.com/services/T{}/B{}/{} failed",
        fake(10),
        fake(10),
        fake(24),
        kept="hooks.slack.com/services/",
    ),
    shape(
        "discord-webhook",
        "notify https://discord.com/api/webhooks/{}/{}",
        fake(18, string.digits),
        fake(68, URLSAFE),
        kept="discord.com/api/webhooks/",
    ),
    shape("stripe-secret", "charge with sk_live_{}", fake(99), kept="charge with"),
    shape("stripe-restricted", "STRIPE_KEY rk_live_{}", fake(99), kept="STRIPE_KEY"),
    shape("npm", "//registry.npmjs.org/:_authToken=npm_{}", fake(36), kept="_authToken="),
    shape("npm-bare", "publish with npm_{}", fake(36), kept="publish with"),
    shape("pypi", "twine upload -p pypi-AgEIcHlwaS5vcmc{} dist/*", fake(150, URLSAFE), kept="twine upload -p"),
    shape("docker-hub", "echo dckr_pat_{} | docker login --password-stdin", fake(27, URLSAFE), kept="docker login --password-stdin"),
    shape("gitlab", "remote: glpat-{} rejected", fake(20, URLSAFE), kept="remote:"),
    shape("github-classic", "pushed with ghp_{}", fake(36), kept="pushed with"),
    shape("github-fine", "GH_PAT github_pat_{}_{}", fake(22), fake(59), kept="GH_PAT"),
    shape("sendgrid", "mail via SG.{}.{}", fake(22, URLSAFE), fake(43, URLSAFE), kept="mail via"),
    shape("twilio-sid-key", "twilio client SK{} AC{}", fake(32, HEX), fake(32, HEX), kept="twilio client"),
    shape("twilio-token", "TWILIO_AUTH_TOKEN={}", fake(32, HEX), kept="TWILIO_AUTH_TOKEN="),
    shape("digitalocean", "doctl auth init -t dop_v1_{}", fake(64, HEX), kept="doctl auth init -t"),
    shape("databricks", "DATABRICKS_HOST=https://x.cloud.databricks.com dapi{}-2", fake(32, HEX), kept="DATABRICKS_HOST="),
    shape("tailscale", "tailscale up --authkey=tskey-auth-k{}-{}", fake(11), fake(30), kept="--authkey="),
    shape("tailscale-bare", "joined with tskey-auth-k{}-{}", fake(11), fake(30), kept="joined with"),
    shape("langsmith", "tracing to lsv2_pt_{}_{}", fake(32, HEX), fake(10, HEX), kept="tracing to"),
    shape("shopify", "shop token shpat_{}", fake(32, HEX), kept="shop token"),
    shape("jwt", "id eyJhbGciOiJIUzI1NiJ9.eyJ{}.{}", fake(40, URLSAFE), fake(43, URLSAFE), kept="id "),
    # ML services
    shape("kaggle-json", '{{"username":"alice","key":"{}"}}', fake(32, HEX), kept='"key":"'),
    shape("kaggle-json-spaced", "cat ~/.kaggle/kaggle.json: {{'username': 'alice', 'key': '{}'}}", fake(32, HEX), kept="'key': '"),
    shape("kaggle-env", "KAGGLE_KEY={}", fake(32, HEX), kept="KAGGLE_KEY="),
    shape("neptune", "NEPTUNE_API_TOKEN=eyJhcGlfYWRkcmVzcyI6{}", fake(120, B64) + "==", kept="NEPTUNE_API_TOKEN="),
    shape("comet", "COMET_API_KEY: {}", fake(25), kept="COMET_API_KEY: "),
    # netrc
    shape("netrc-line", "machine api.wandb.ai login user password {}", HEX40, kept="machine api.wandb.ai login user password "),
    shape("netrc-own-line", "  password {}", HEX40, kept="  password "),
    shape("netrc-own-line-srun", "0:   password {}", HEX40, kept="password "),
    # HTTP
    shape("cookie", "Cookie: sessionid={}; csrftoken={}", fake(32), fake(32), kept="Cookie: "),
    shape("set-cookie", "< Set-Cookie: session={}; Path=/; HttpOnly", fake(40, URLSAFE), kept="Set-Cookie: "),
    shape("x-api-key", "curl -H 'X-Api-Key: {}' https://api.example.com", fake(32), kept="X-Api-Key: "),
    shape("basic-auth-header", "Authorization: Basic {}", fake(24, B64) + "==", kept="Authorization: Basic "),
    shape("bearer", "sent Bearer {} to the hub", fake(40, URLSAFE), kept="sent Bearer "),
    shape("url-userinfo", "git clone https://alice:{}@github.com/org/repo.git", fake(20), kept="https://alice:"),
    shape("url-redis", "Error connecting to redis://:{}@cache:6379/0", fake(20), kept="redis://:"),
    shape("url-postgres", "sqlalchemy postgresql+psycopg2://ml:{}@db:5432/runs", fake(20), kept="postgresql+psycopg2://ml:"),
    shape("url-token", "GET https://data.example.com/shard-1.tar?token={}", fake(32), kept="?token="),
    shape("url-key", "GET https://api.example.com/v1/x?user=a&key={}&n=1", fake(32), kept="&key="),
    shape("url-api-key", "GET https://api.example.com/v1/x?q=1&api_key={}", fake(32), kept="&api_key="),
    shape("url-access-token", "GET https://graph.example.com/me?fields=id&access_token={}", fake(40), kept="&access_token="),
    # generic names
    shape("django-secret-key", "SECRET_KEY={}", "django-insecure-" + fake(50, ALNUM + "!@#$%^&*(-_=+)"), kept="SECRET_KEY="),
    shape("client-secret-json", '{{"client_id": "123", "client_secret": "{}"}}', fake(24), kept='"client_secret": "'),
    shape("yaml-password-quoted", 'password: "{}"', "two words " + fake(6), kept="password: "),
    shape("python-dict", "{{'hf_token': '{}', 'clientSecret': '{}'}}", fake(12), fake(12), kept="'clientSecret': '"),
]


def _leaks(secret: str, text: str) -> bool:
    """Any eight characters in a row of the secret still in the text (or the secret, if shorter)."""
    n = min(8, len(secret))
    return any(secret[i : i + n] in text for i in range(len(secret) - n + 1))


def test_the_catalogue_covers_many_shapes() -> None:
    assert len(SHAPES) >= 50
    assert len({p.id for p in SHAPES}) == len(SHAPES)


@pytest.mark.parametrize(("text", "secrets", "kept"), SHAPES)
def test_secret_shape_is_masked_by_both_engines_and_the_key_name_kept(text: str, secrets: tuple[str, ...], kept: str) -> None:
    once = redact(text)
    assert MASK in once and kept in once, once
    for secret in secrets:
        assert not _leaks(secret, once), once
    assert redact(once) == once
    frame = pl.DataFrame({"message": [text], "n": [1]})
    assert redact_frame(frame).item(0, "message") == once


#: Ordinary training-log text that must come out exactly as it went in.
ORDINARY = [
    "throughput 5120 tokens/s, 12 tokens per second per GPU",
    "python train.py --num-tokens 4 --max-tokens 4096 --tokenizer gpt2 --token-file /run/secrets/hf",
    "token_count=512 tokenizer=gpt2 key_padding_mask=None sort_key=length",
    "node01:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
    "node01:1234:1290 [0] NCCL INFO comm 0x7f8a4c000f00 rank 0 nranks 2 cudaDev 0 busId 1000 commId 0x9b1c5e0e4c7c2d1f - Init COMPLETE",
    "NCCL version 2.18.1+cuda12.1",
    "NCCL INFO cudaDriverVersion 12020",
    "Segmentation fault (core dumped) at address 0x7f3a2c1b4000",
    "PyTorch version: 2.1.0+cu121 (git commit 7bcf7da3a268b435777fe87c7794c382f444e86d)",
    "CUDA Version: 12.2     Driver Version: 535.104.05",
    "Digest: sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "model.safetensors sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "Saving checkpoint to /scratch/alice/runs/llama2-7b/checkpoint-1000/pytorch_model.bin",
    "[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    "PWD=/home/alice/project OLDPWD=/home/alice",
    "forward_pass: 12.3ms backward_pass: 20.1ms",
    "INFO - llmtuner.data.template - Replace eos token: <|im_end|>",
    "pad_token: [PAD] eos_token='</s>' bos_token: <s>",
    "mkdir -p /tmp/run && ssh -p 2222 node02 hostname && tar -xpf data.tar",
    "mysql -u root -h db.internal -P 3306 ml -e 'select 1'",
    "Using key: model.layers.0.self_attn.q_proj.weight",
    '{"key": "model.embed_tokens.weight", "shape": [32000, 4096]}',
    'FATAL:  password authentication failed for user "postgres"',
    "Enter password:",
    "AccountName=devstoreaccount1;BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;",
    "ssh -o StrictHostKeyChecking=no -o HostKeyAlgorithms=ssh-ed25519 node02",
    "MASTER_ADDR=node01 MASTER_PORT=29500 WORLD_SIZE=8 RANK=0 NCCL_SOCKET_IFNAME=eth0",
    "wandb: View run at https://wandb.ai/team/project/runs/3f2a1b9c",
    "https://huggingface.co/meta-llama/Llama-2-7b-hf/resolve/main/config.json",
    "Downloading (…)okenizer_config.json: 100%|██████████| 776/776 [00:00<00:00, 3.1MB/s]",
    "git rev-parse HEAD: 3f2a1b9c0d4e5f60718293a4b5c6d7e8f9012345",
    "RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
    "-----BEGIN CERTIFICATE-----",
    "-----BEGIN RSA PRIVATE KEY-----",
    "    wandb.login(key=os.environ['WANDB_API_KEY'])",
    "    tokenizer.pad_token_id = tokenizer.eos_token_id",
    "Cookie jar loaded from /home/alice/.cookies",
    "HF_HUB_ENABLE_HF_TRANSFER=1 HF_HOME=/scratch/hf_cache",
    "srun: error: node02: task 1: Exited with exit code 1",
]


@pytest.mark.parametrize("text", KEPT + ORDINARY)
def test_ordinary_text_is_not_masked_by_either_engine(text: str) -> None:
    assert redact(text) == text
    assert redact_frame(pl.DataFrame({"message": [text]})).item() == text


def test_engines_agree_on_everything_at_once() -> None:
    """All shapes in one text (and each after another one, on one line): the same in both engines, and stable."""
    texts = [p.values[0] for p in SHAPES] + ORDINARY
    blob = "\n".join(texts)
    joined = [a + " " + b for a, b in zip(texts, [*texts[1:], texts[0]], strict=True)]
    got = pl.DataFrame({"t": [blob, *joined]}).select(redact_expr(pl.col("t"))).to_series().to_list()
    assert got == [redact(t) for t in [blob, *joined]]
    assert [redact(g) for g in got] == got


#: Fragments that rules key on; random texts made of them must come out stable, the same in both engines.
_PIECES = [
    *("token", "TOKEN", "password", "secret_access_key ", "_PWD", "key", "cookie", "Bearer ", "Authorization: ", "wandb.login(key="),
    *(" ", "=", ": ", '"', "'", "\n", "\\n", ";", ")", "/", "+", "|", "@", "?", "&key=", "://", "-", "--", "_", "x", "0: ", "[rank0]:"),
    *("-p", "mysql ", "sshpass -p ", "curl -u a:", "machine h login u password ", "\n  password "),
    *("[REDACTED]", "-----BEGIN PRIVATE KEY-----", "-----END PRIVATE KEY-----", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "hf_"),
    *("abcdefghijKLMNOP0123", "0123456789abcdef0123456789abcdef", "AKIAIOSFODNN7EXAMPLE", "é", "█"),
]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(_PIECES), max_size=24))
def test_redacting_twice_changes_nothing_and_the_engines_agree(pieces: list[str]) -> None:
    text = "".join(pieces)
    once = redact(text)
    assert redact(once) == once
    assert pl.DataFrame({"t": [text]}).select(redact_expr(pl.col("t"))).item() == once


# --- every text column, and the logs we ship -------------------------------------------------

LOG_DIRS = [ROOT / "examples", ROOT / "tests" / "data", ROOT / "tests" / "fixtures", ROOT / "tests" / "rules", ROOT / "corpus"]
#: The only lines of those logs that redaction may change: the fixture that holds a fake token on purpose.
EXPECTED_CHANGES = {
    ("tests/fixtures/make_fixtures.sh", 15),
    ("tests/fixtures/torchrun-secret/train.log", 5),
    ("tests/fixtures/torchrun-secret/train.log", 13),
    # a public log the reporter had already redacted by hand: "--api-key REDACTED" becomes "--api-key [REDACTED]"
    ("corpus/crash_signal--public-deepspeed-3989-exit-code-minus11-2x3090/train.log", 1),
}


def _log_lines() -> pl.DataFrame:
    rows: dict[str, list[object]] = {"file": [], "line": [], "text": []}
    for top in LOG_DIRS:
        for path in sorted(p for p in top.rglob("*") if p.is_file() and p.suffix != ".py"):
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            lines = text.splitlines()
            rows["file"] += [path.relative_to(ROOT).as_posix()] * len(lines)
            rows["line"] += range(1, len(lines) + 1)
            rows["text"] += lines
    return pl.DataFrame(rows)


def test_the_logs_we_ship_and_test_on_come_out_unchanged() -> None:
    lines = _log_lines()
    assert lines.height > 1_000
    clean = redact_frame(lines, ("text",))
    changed = lines.filter(clean["text"] != lines["text"])
    got = set(zip(changed["file"], changed["line"], strict=True))
    assert got <= EXPECTED_CHANGES, "\n".join(f"{f}:{n}: {t}" for f, n, t in changed.iter_rows() if (f, n) not in EXPECTED_CHANGES)
    assert ("tests/fixtures/torchrun-secret/train.log", 13) in got
    few = lines.filter(pl.col("file").str.starts_with("examples/") | pl.col("file").str.starts_with("tests/data/"))
    assert [redact(t) for t in few["text"]] == few["text"].to_list()


def test_redact_frame_covers_every_string_column_by_default() -> None:
    secret = "hf_" + fake(34)
    df = pl.DataFrame({"message": ["ok"], "reason": [f"token {secret}"], "file": [f"/tmp/{secret}/x.log"], "rank": [0], "kind": [None]})
    clean = redact_frame(df)
    assert clean.item(0, "reason") == f"token {MASK}" and clean.item(0, "file") == f"/tmp/{MASK}/x.log"
    assert clean.item(0, "message") == "ok" and clean.schema == df.schema
    assert redact_frame(df, ("message",)).item(0, "reason") == f"token {secret}"  # only the columns asked for


def test_events_export_leaks_a_token_through_no_column(tmp_path: Path) -> None:
    secret = "hf_" + fake(34)
    log = tmp_path / "train.log"
    log.write_text(
        f"[rank0]: Traceback (most recent call last):\n"
        f'[rank0]:   File "/work/train.py", line 3, in <module>\n'
        f"[rank0]: ValueError: cannot fetch https://hub.example.com/x?token=x with {secret}\n"
        f"srun: error: node01: task 0: Exited with exit code 1\n"
        f"slurmstepd: error: *** JOB 12 ON node01 CANCELLED AT 2024-01-01T00:00:00 DUE TO {secret} ***\n"
    )
    out = tmp_path / "x.jsonl"
    result = runner.invoke(app, ["events", str(log), "--output", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and secret not in out.read_text()
    assert any(MASK in str(v) for row in rows for v in row.values())
    unmasked = runner.invoke(app, ["events", str(log), "--no-redact", "--output", str(out)])
    assert unmasked.exit_code == 0 and secret in out.read_text()
