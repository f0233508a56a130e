"""The configuration files, read through one typed schema (pydantic v2 models).

Three kinds of file are read, all of them here and nowhere else:

- the **deployment file** (:class:`DeploymentFile`) of ``verticalfs party serve --config`` and
  ``verticalfs run --config`` (a file with ``[parties.<name>]`` tables);
- the **options file** (:class:`RunFile`) of ``verticalfs run --config``: any option of ``run``;
- the **assignment file** (:class:`AssignmentFile`) of ``--assignment``: columns per party (TOML or JSON).

Every model refuses unknown keys (suggesting the closest valid one) and takes values of exactly
their type: a boolean is ``true`` or ``false``, never the string ``"false"``; a number is never a
string or a list. A problem is one :class:`~verticalfs.exceptions.ConfigError` line naming the
file, the key as a dotted path (``parties.telecom.address``), the value given and what is expected
(:func:`validate`). The models' field descriptions are the reference page
``docs/reference/configuration.md``, written by ``python -m verticalfs.configuration``.
"""

from __future__ import annotations

import difflib
import json
import sys
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from verticalfs.exceptions import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: the values of ``scaling`` and ``impute`` (as ``verticalfs.data.vertical.SCALINGS`` / ``IMPUTATIONS``;
#: a test keeps them equal; repeated here so that reading a file does not import pandas)
Scaling = Literal["minmax", "standard", "robust", "quantile", "none"]
Impute = Literal["auto", "median", "mean", "most-frequent", "none"]
ImputeFixed = Literal["median", "mean", "most-frequent", "none"]
#: date and time columns (as ``verticalfs.data.preprocess.DATETIME_CHOICES``)
DatetimeChoice = Literal["refuse", "drop", "derive"]
Task = Literal["classification", "regression", "binary", "multiclass"]


def split_address(v: str) -> tuple[str, int]:
    """``(host, port)`` of a checked ``host:port`` address."""
    host, _, port = v.rpartition(":")
    return host, int(port)


def _host_port(v: str) -> str:
    host, sep, port = v.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError("not host:port")
    return v


Address = Annotated[str, AfterValidator(_host_port),
                    Field(json_schema_extra={"expects": 'a string "host:port" with a port 1-65535 '
                                                        '(e.g. "10.0.0.2:7001")'})]
# paths are strings in a file (a Path instance from Python is taken too)
FilePath = Annotated[Path, Field(strict=False)]


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)


# ------------------------------------------------------------------------------ party policy
class PartyPolicy(_Model):
    """What a party agrees to do, checked by the party itself before any work: a request outside it
    is refused with one line (a PolicyError) naming the party, the rule and the key to change.
    In-process runs (one process holds every party) allow everything, as experiments need."""

    methods: list[str] | Literal["all"] = Field(
        "all", description='The methods (and pipeline stages) the party joins: a list of names, or `"all"`.',
        json_schema_extra={"expects": 'a list of method names or "all"'})
    release_columns: bool = Field(False, description="Send raw columns to the label holder (`GatherColumns`: "
                                  "filter methods' evaluation classifier, `raw`). When false, a filter method over "
                                  "a deployment selects and the label holder then trains a split model (`vfl`) on "
                                  "the selected columns; `raw` is refused.")
    min_key_bits: int = Field(2048, ge=0, description="The smallest Paillier key the party uses or accepts (its own "
                              "keys in a method's secure mode, and every public key it receives); 3072 for "
                              "protection beyond 2030.")
    require_secure: bool = Field(True, description="Refuse the plaintext mode of a method that has a secure mode "
                                 "(`fedsdg-fs` with `secure = false`, the plaintext Gini / F-statistic labels of "
                                 "`ms-gini` and `sffs`).")
    accept_labels: bool = Field(True, description="Join protocols that send the party the labels in the clear "
                                "(`feast`, `mi`: their papers' design). False refuses them at `Join`.")
    min_rows_per_bin: int = Field(16, ge=1, description="Histogram trees (`secureboost`, `sbt-filter`): every bin "
                                  "of a feature holds at least this many of the party's training rows (smaller "
                                  "quantile bins are merged), so no split isolates fewer rows of its columns.")
    min_rows_per_node: int = Field(16, ge=1, description="Histogram trees: the party returns no histogram of a node "
                                   "with fewer rows, and makes no split that leaves either side fewer (the label "
                                   "holder learns per-bin sums and instance spaces of groups this large at least).")
    model_dir: FilePath | None = Field(None, description="The folder the party saves models into: the label holder "
                                       "sends only a model name (no separator, no `..`) and the party writes "
                                       "`<model_dir>/<name>/<party>.pt`. Relative to the file that sets it. "
                                       "Default in a deployment: `models/<party>` beside the deployment file.")
    max_psi_requests: int = Field(16, ge=1, description="New intersections the party answers within "
                                  "`psi_window_hours`: private set intersection requests and alignments (`Align`) "
                                  "of an id set it has not aligned before; a new intersection costs two. A run "
                                  "whose intersection the label holder took from its cache (unchanged files) costs "
                                  "nothing. Kept in the party's working folder across restarts "
                                  "(`state/<party>/psi-budget.json`; delete it to reset).")
    psi_window_hours: float = Field(24.0, gt=0, description="The sliding window of `max_psi_requests`, in hours "
                                    "(a charge leaves it this long after it was made).")
    max_psi_ids: int | Literal["auto"] = Field(
        "auto", description="The most ids in one PSI request or `Align`; `\"auto\"`: 10 times the party's own rows "
        "(of the file the PSI is over). A label holder with more ids than that (30 times your rows is a guessed "
        "id range) is refused: raise it for a label holder much larger than you.",
        json_schema_extra={"expects": 'an integer >= 1 or "auto"'})
    psi_ids_per_session: int | Literal["auto"] = Field(
        "auto", description="The most ids the label holder may claim in one session (its PSI requests, and the "
        "ids of an `Align` or `StageIds` refused because the party does not hold them all); `\"auto\"`: 10 times "
        "the party's rows.", json_schema_extra={"expects": 'an integer >= 1 or "auto"'})
    psi_ids_per_day: int | Literal["auto"] = Field(
        "auto", description="The same, over every session of a day (UTC; kept in the party's working folder, so "
        "a restart does not reset it); `\"auto\"`: 20 times the party's rows. A label holder learns the membership "
        "of at most this many ids of its choice a day.", json_schema_extra={"expects": 'an integer >= 1 or "auto"'})
    max_message_mb: float = Field(256.0, gt=0, le=2047, description="The largest message the party accepts, in "
                                  "MiB (its gRPC receive limit): a larger one is refused before it is buffered.")
    max_sessions: int = Field(4, ge=1, description="Label-holder runs (sessions: a training run, a `predict`, a "
                              "`serve-model`) the party serves at once, each with its own state; another is "
                              "refused as busy, naming the session that holds the party.")
    session_idle_s: float = Field(900.0, gt=0, description="Seconds after which a session without any message "
                                  "is forgotten (a label holder that died without ending its run), freeing its "
                                  "place.")
    # ---- issue 50: what the party checks in what it computes (docs/security.md, threat model)
    allow_findings: list[str] = Field(
        [], description="Methods with an open finding of the security review (a raw column or a row's bin a "
        "label holder can obtain: `python -m verticalfs.trust` lists them, docs/security.md explains each) are "
        "refused at `Join`, naming the finding; list a finding's id here to join such a method anyway.",
        json_schema_extra={"expects": "a list of finding ids"})
    own_randomness: bool = Field(True, description="The party draws its own randomness (its bottom model's "
                                 "initialisation, its synthesis networks, its gate noise) from the operating "
                                 "system's entropy instead of the seeds in the label holder's spec, and reseeds "
                                 "after restoring a checkpoint; false reproduces an in-process run exactly (the "
                                 "label holder then knows the party's initial weights).")
    min_hidden_layers: int = Field(1, ge=0, description="The fewest non-linear hidden layers a bottom model the "
                                   "label holder proposes must have (0 allows a linear bottom model, whose "
                                   "embeddings give the raw columns to a label holder that knows its weights).")
    max_embedding_fraction: float | None = Field(
        0.5, gt=0, description="The widest embedding a bottom model may send, as a fraction of the party's input "
        "width (its features in use; rounded down): an embedding as wide as the input can be inverted. Null: no "
        "limit.", json_schema_extra={"expects": "a number > 0, or leave it out for no limit"})
    min_lr: float = Field(1e-6, ge=0, description="The smallest learning rate the party trains with.")
    max_lr: float | None = Field(1.0, gt=0, description="The largest learning rate the party trains with (a "
                                 "huge step lets the label holder's gradients overwrite the party's weights).")
    min_batch_size: int = Field(16, ge=1, description="The smallest mini-batch the party trains on (a batch of "
                                "one row makes each update a function of one row).")
    max_batch_size: int | None = Field(None, ge=1, description="The largest mini-batch the party trains on "
                                       "(null: no limit).")
    verify_labels: bool = Field(True, description="Sum the label holder's encrypted labels (`fate-iv`, "
                                "FedSDG-FS's Algorithm 1, `ms-gini`, `sffs`) only with a zero-knowledge proof that "
                                "each ciphertext encrypts a label (0/1, a one-hot class) and of the class totals "
                                "(`LabelProof`); without it a label holder encrypting row markers reads every "
                                "row's bin.")
    min_label_rows: int = Field(10, ge=1, description="The fewest rows each class of the label holder's proven "
                                "labels must have (a class of one row singles that row out).")
    max_bins: int = Field(32, ge=2, description="The most bins per feature a label holder may ask for "
                          "(`n_bins` of `fate-iv`, Algorithm 1, `ms-gini`).")
    min_bin_rows: int = Field(10, ge=1, description="The fewest training rows in each of the party's bins: "
                              "smaller bins are merged with a neighbour before any label sum.")
    max_classes: int = Field(1024, ge=2, description="The most classes a label holder's encrypted labels may "
                             "have.")
    max_epsilon: float | None = Field(
        None, gt=0, description="Train only under differential privacy the party accounts for itself: with a "
        "value, a method without DP-SGD at the party is refused, and the party runs Opacus's RDP accountant over "
        "its own noisy steps, refusing a spec whose noise cannot give one epoch within `max_epsilon` (at "
        "`dp_delta`) and any step beyond it. Null: no requirement.",
        json_schema_extra={"expects": "a number > 0, or leave it out"})
    dp_delta: float = Field(1e-5, gt=0, lt=1, description="The delta at which the party accounts its own "
                            "epsilon under `max_epsilon`.")
    paillier_randomness: Literal["full", "short"] | None = Field(
        "full", description="The randomness of the Paillier keys the party makes and of its encryptions "
        "(`full`: `r**n`; `short`: Damgård-Jurik-Nielsen short exponents, an extra assumption); null: the label "
        "holder's choice.", json_schema_extra={"expects": '"full", "short", or leave it out'})
    paillier_backend: str | None = Field(
        "auto", description="The Paillier back end of the party's own keys (`auto`, `python`, `pypaillier`, "
        "`heu`, `phe`); null: the label holder's choice.")
    stage_psi_ids_only: bool = Field(True, description="Stage for scoring (`StageIds`) only ids the party offered "
                                     "in its last scoring PSI: a request naming any other id is refused whole and its "
                                     "ids count against the PSI budget (else `StageIds` is a membership oracle).")
    own_models_only: bool = Field(True, description="Open only model parts the party saved itself: each part "
                                  "carries an HMAC under a secret in the party's working folder, checked at "
                                  "`OpenModel` / `LoadModel`, whatever checksum the label holder sends.")

    @classmethod
    def permissive(cls) -> PartyPolicy:
        """Every request allowed (the in-process path: one process holds every party), the label
        holder's seeds and shapes taken as given: an in-process run is reproducible from its seed."""
        return cls(release_columns=True, min_key_bits=0, require_secure=False, accept_labels=True,
                   max_psi_requests=2**62, max_psi_ids=2**62, psi_ids_per_session=2**62, psi_ids_per_day=2**62,
                   max_message_mb=2047, allow_findings=["all"],
                   own_randomness=False, min_hidden_layers=0, max_embedding_fraction=None, min_lr=0.0,
                   max_lr=None, min_batch_size=1, verify_labels=False, min_label_rows=1, max_bins=2**20,
                   min_bin_rows=1, max_classes=2**20, paillier_randomness=None, paillier_backend=None,
                   own_models_only=False, stage_psi_ids_only=False)

    @property
    def max_message_bytes(self) -> int:
        return int(self.max_message_mb * 2**20)

    def lines(self) -> list[str]:
        """The effective policy as ``key = value`` lines (``party serve`` prints them at start)."""
        out = []
        for k in type(self).model_fields:
            v = getattr(self, k)
            out.append(f"{k} = {json.dumps(str(v) if isinstance(v, Path) else v)}")
        return out


# ------------------------------------------------------------------------------ deployment
class DeploymentParty(_Model):
    """One ``[parties.<name>]`` table."""

    address: Address = Field(description="Where the party is reached, `host:port`. Two parties whose addresses "
                             "resolve to the same host and port (`localhost:7001`, `127.0.0.1:7001`) are refused, "
                             "and so is port 0 (any free port: nobody could know which).")
    file: FilePath = Field(description="The party's own data file (`.csv`, `.csv.gz`, `.parquet`) with the id "
                           "column; relative to the deployment file. Only this party's host needs it.")
    listen: Address | None = Field(None, description="Where the party binds, `host:port` (default: `address`), "
                                   "e.g. `\"0.0.0.0:7001\"` behind a NAT.")
    categorical: list[str] | Literal["auto"] = Field(
        [], description='Columns to one-hot encode, or `"auto"` (every non-numeric column).',
        json_schema_extra={"expects": 'a list of column names or "auto"'})
    datetime: DatetimeChoice = Field("refuse", description="Columns holding dates or times: refused with their "
                                     "names (`refuse`), left out (`drop`), or each made into its year, month and "
                                     "day as numeric columns (`derive`; a saved model derives them from new rows).")
    certs: FilePath | None = Field(None, description="This party's TLS folder, if not the top-level `certs`.")
    policy: PartyPolicy = Field(PartyPolicy(), description="The party's `[parties.<name>.policy]` table "
                                "(keys below): what it agrees to do.",
                                json_schema_extra={"expects": "a [parties.<name>.policy] table"})
    predict_file: FilePath | None = Field(None, description="The rows this party scores with a saved model "
                                          "(`verticalfs predict --config`, `verticalfs serve-model`), with the id "
                                          "column; relative to the deployment file. Default: its `file`.")
    engine: Literal["local", "ray"] = Field("local", description="Where the party reads, prepares and "
                                            "PSI-blinds its table: `local` (its own process) or `ray` (a Ray "
                                            "cluster: the `ray` extra, docs/scale.md); `party serve --engine` "
                                            "overrides it.")
    ray_address: str | None = Field(None, description="The party's Ray cluster (`HOST:PORT` of its head, as `ray "
                                    "start --head` prints it) with `engine = \"ray\"`; default: a Ray instance "
                                    "the party starts on its own host. `party serve --ray-address` overrides it.")
    work_dir: FilePath | None = Field(None, description="The party's working folder for a table read in pieces "
                                      "(the sorted ids, the alignment, the prepared matrices); relative to the "
                                      "deployment file. With `engine = \"ray\"` on several hosts: a folder every Ray "
                                      "worker reaches (a shared filesystem). Default: a new temporary folder.")
    table: str | None = Field(None, description="Where the `ray` engine reads the party's Parquet table, when not "
                              "`file`: a folder or a URI pyarrow reads (`s3://bucket/table/`, `gs://...`, "
                              "`hdfs://...`, `file://...`).")


class DeploymentFile(_Model):
    """The deployment file: who takes part, where each listens, which file each holds, the TLS
    material. The same file on every host."""

    label_party: str = Field(description="The party whose file holds the label; it runs "
                             "`verticalfs run --config` (and serves its other columns itself).")
    label_column: str = Field(description="The label column in the label party's file.")
    id_column: str = Field("id", description="The id column every file holds (read as text; rows are matched "
                           "by private set intersection).")
    parties: dict[str, DeploymentParty] = Field(
        min_length=1, description="One `[parties.<name>]` table per party, in the order of the feature blocks.",
        json_schema_extra={"expects": "[parties.<name>] tables with address and file"})
    certs: FilePath | None = Field(None, description="Folder with `ca.pem`, `<party>.pem`, `<party>.key` "
                                   "(`verticalfs certs make`), relative to this file. Keys must be private "
                                   "(mode 0600). Required unless `insecure`.")
    insecure: bool = Field(False, description="No TLS: messages in the clear and any process that reaches an "
                           "address can claim to be a party. Local experiments only; every process warns.")
    task: Task | None = Field(None, description="The label's task (inferred when unambiguous).")
    na_values: list[str] | str | None = Field(None, description="Extra strings read as missing: a list, or one "
                                              "comma-separated string.")
    delimiter: str = Field(",", min_length=1, max_length=1, description="The CSV delimiter.",
                           json_schema_extra={"expects": "one character"})
    encoding: str = Field("utf-8", description="The files' text encoding.")
    scaling: Scaling = Field("minmax", description="Scaling, fitted on each party's own training rows.")
    impute: ImputeFixed = Field("none", description="Missing values, from each party's own training rows "
                                "(`none`: an error).")
    test_size: float = Field(0.2, ge=0, lt=1, description="Share of the aligned rows held out for testing.")
    val_size: float = Field(0.1, ge=0, lt=1, description="Share of the aligned rows for validation.")
    connect_timeout: float = Field(10.0, gt=0, description="Seconds to wait for a party to be reachable.")
    call_timeout: float = Field(30.0, gt=0, description="Deadline in seconds of one per-batch call to a party "
                                "(training, evaluation, prediction); PSI, set-up and selection calls have "
                                "`setup_timeout`. A hung party is detected sooner, by unanswered keep-alive pings "
                                "(within 9 s; 15 s on a loaded host).")
    setup_timeout: float = Field(1800.0, gt=0, description="Deadline in seconds of one call outside the per-batch "
                                 "ones: a PSI chunk, `Align`, `Join`, a selection step (e.g. `fate-iv`'s encrypted "
                                 "bin sums, which grow with rows x features).")
    retries: int = Field(3, ge=0, le=10, description="Times a call whose reply was lost (connection dropped) is "
                         "sent again, after 0.2 s, 0.4 s, ...; the party answers a repeat from its cache, so a "
                         "retry never computes twice.")
    rejoin_window: float = Field(60.0, ge=0, description="Seconds a run waits for a party that went away mid-run "
                                 "(killed, restarted, stopped) to come back; then it sets the party up again and "
                                 "continues from its last checkpoint (with `checkpoints`; else from the method's "
                                 "start), with the metrics of an uninterrupted run. 0: fail at once.")
    fan_out: Literal["concurrent", "sequential"] = Field(
        "concurrent", description="Per-batch requests to the parties: all at once (a round costs the slowest "
        "party) or one after another.")
    psi_engine: Literal["auto", "ristretto255", "openmined"] = Field(
        "auto", description="The private set intersection engine of the training ids (`verticalfs.psi`): "
        "`ristretto255` (libsodium through rbcl, streamed in chunks over both cores), `openmined` "
        "(openmined-psi), or `auto` (ristretto255 where rbcl is installed, else openmined). Every party "
        "answers either; scoring files are intersected with openmined.")
    checkpoints: FilePath | None = Field(None, description="A folder: each party keeps its checkpoints in "
                                         "`<folder>/<party>` (relative to this file).")
    max_file_mb: float = Field(1024.0, gt=0, description="The most megabytes a party's file may hold, on disk and "
                               "decompressed (`.csv.gz`, Parquet); a larger file is refused before it is read. "
                               "`party serve --max-file-mb` overrides it on one host.")
    stream_above_mb: float = Field(256.0, ge=0, description="A party file (or folder of Parquet files) at least this "
                                   "large is read in pieces through pyarrow and prepared into memory-mapped float32 "
                                   "matrices in a working folder (bounded memory; the same prepared values); a "
                                   "smaller one is read whole into memory. 0: always in pieces.")

    @property
    def max_file_bytes(self) -> int:
        """``max_file_mb`` in bytes."""
        return int(self.max_file_mb * 2**20)


# ------------------------------------------------------------------------------ run options
_Scalar = Union[str, int, float, bool]  # noqa: UP007 - a runtime alias
_ParamValue = Union[str, int, float, bool, list[_Scalar]]  # noqa: UP007


class RunFile(_Model):
    """The options file of ``verticalfs run --config run.toml``: any option of ``run`` (the command
    line wins). Keys may be written with ``-`` or ``_``. Paths are relative to the current folder."""

    method: str | None = Field(None, description="A registered method, or a pipeline such as `feast+sparsevfl-16`.")
    pipeline: list[str] | str | None = Field(None, description='The methods of a pipeline, e.g. `["feast", '
                                             '"sparsevfl-16"]` (instead of `method`).')
    dataset: str | None = Field(None, description="A data set name (`verticalfs datasets`).")
    parties: int | None = Field(None, ge=1, description="Number of feature-holding parties (default 3).")
    noise: float | list[float] | str = Field(0.0, description="Noise features as a fraction of each party's "
                                             "columns: one value, or one per party.")
    overlap: int | list[int] | str = Field(0, description="Columns of other parties copied into each party: one "
                                           "value, or one per party.")
    epochs: int | None = Field(None, ge=1, description="Communication epochs (the method's `epochs`).")
    seed: int = Field(0, ge=0, lt=2**32, description="Seeds the split, the models and the method.")
    param: dict[str, _ParamValue] = Field(
        {}, description='A `[param]` table of method parameters, `name = value` (`"method.name"` for one '
        "method of a pipeline).", json_schema_extra={"expects": "a [param] table of name = value"})
    codec: str | None = Field(None, description="Payload codec of embeddings and gradients (float32, float16, int8).")
    partition: str | None = Field(None, description="Column split: random, contiguous, or a paper's layout.")
    assignment: FilePath | None = Field(None, description="An assignment file (columns per party).")
    scaling: Scaling = Field("minmax", description="Scaling, fitted on each party's training rows.")
    impute: Impute = Field("auto", description="Missing values (auto: the data set's default).")
    party_file: dict[str, str] = Field(
        {}, description="Your own data: a `[party_file]` table of `name = path`.",
        json_schema_extra={"expects": 'a [party_file] table of name = path: a line [party_file] followed by '
                           'lines such as bank = "bank.csv"'})
    label_party: str | None = Field(None, description="With `party_file`: the party whose file holds the label.")
    label_column: str | None = Field(None, description="With `party_file`: the label column.")
    strip_ids: bool = Field(False, description="With `party_file`: strip surrounding whitespace and leading "
                            "zeros from every id before aligning.")
    id_column: str = Field("id", description="With `party_file`: the id column shared by all files.")
    datetime: DatetimeChoice = Field("refuse", description="With `party_file`: columns holding dates or times are "
                                     "refused (`refuse`), left out (`drop`) or made into their year, month and day "
                                     "(`derive`).")
    categorical: list[str] | str | None = Field(
        None, description='With `party_file`: `["party:col1,col2", ...]`, or `"auto"`.',
        json_schema_extra={"expects": 'a list of "party:column,column" or "auto"'})
    na_values: list[str] | str | None = Field(None, description="With `party_file`: extra strings read as missing.")
    delimiter: str = Field(",", description="With `party_file`: the CSV delimiter.")
    encoding: str = Field("utf-8", description="With `party_file`: the files' text encoding.")
    task: Task | None = Field(None, description="classification or regression (inferred when unambiguous).")
    max_file_mb: float = Field(1024.0, gt=0, description="The most megabytes a compressed party file may expand to.")
    data_dir: FilePath | None = Field(None, description="Folder with the benchmark data sets.")
    out: FilePath | None = Field(None, description="Write the result JSON here.")
    save_model: FilePath | None = Field(None, description="Save the trained model in this folder.")
    progress: bool = Field(True, description="Show progress on standard error: a bar on a terminal, one line per "
                           "epoch or stage (elapsed, ETA, MB sent) otherwise.")
    quiet: bool = Field(False, description="No progress output (the same as `progress = false`).")
    checkpoints: FilePath | None = Field(None, description="Checkpoint every training epoch in this folder.")
    events: FilePath | None = Field(None, description="Write the run's events here, one JSON line each as they "
                                    "happen (docs/reference/events.md).")
    insecure: bool = Field(False, description="With a deployment file only: no TLS.")
    resume: bool = Field(False, description="Continue the interrupted run in `checkpoints`.")
    strict: bool = Field(False, description="Exit with code 3 when the run ends at or near chance or removes "
                         "every feature.")
    force: bool = Field(False, description="Run even when a training phase's time, estimated after its first "
                        "epoch, exceeds 7 days.")

    #: keys read as another key (the form the command line uses)
    SYNONYMS: typing.ClassVar[dict[str, str]] = {"params": "param", "party_files": "party_file"}

    def cli_defaults(self) -> dict[str, Any]:
        """The options as the command line's parser takes them (its ``default_map``)."""
        given = self.model_dump(exclude_unset=True)
        out: dict[str, Any] = {}
        for k, v in given.items():
            if k == "pipeline":
                out["method"] = "+".join(v) if isinstance(v, list) else v
            elif k == "param":
                out["param"] = [f"{pk}={_param_text(pv)}" for pk, pv in v.items()]
            elif k == "party_file":
                out["party_file"] = [f"{pk}={pv}" for pk, pv in v.items()]
            elif k == "categorical":
                out[k] = [v] if isinstance(v, str) else list(v)
            elif isinstance(v, list):  # noise, overlap, na_values: comma-separated on the command line
                out[k] = ",".join(_param_text(x) for x in v)
            elif isinstance(v, Path):
                out[k] = str(v)
            else:
                out[k] = v
        return out


def _param_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ",".join(_param_text(x) for x in v)
    return f"{v}"


# ------------------------------------------------------------------------------ assignment
class AssignmentFile(_Model):
    """The assignment file of ``--assignment``: a ``[parties]`` table of ``name = [columns]``
    (TOML), or ``{"parties": {...}}`` (JSON; the ``parties`` level may be left out)."""

    parties: dict[str, list[str | int]] = Field(
        min_length=1, description="Each party's columns: `name = [\"col\", ...]` (numbers are read as names).",
        json_schema_extra={"expects": 'a [parties] table of name = ["column", ...]'})

    def columns(self) -> dict[str, list[str]]:
        return {p: [f"{c}" for c in cols] for p, cols in self.parties.items()}


# ------------------------------------------------------------------------------ reading
def read_raw(path: str | Path, what: str) -> dict[str, Any]:
    """The table in ``path`` (TOML, or JSON for a ``.json`` file); errors name the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what} {str(p)!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {str(p)!r} is a directory, not a file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {str(p)!r} is not UTF-8 text (TOML files are UTF-8)") from None
    except OSError as exc:
        raise ConfigError(f"{what} {str(p)!r} cannot be read: {exc.strerror}") from None
    try:
        if p.suffix.lower() == ".json":
            raw = json.loads(text)
        else:
            raw = tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        kind = "JSON" if p.suffix.lower() == ".json" else "TOML"
        raise ConfigError(f"{what} {str(p)!r} is not valid {kind}: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{what} {str(p)!r} must hold a table of keys, not a {type(raw).__name__}")
    return raw


def validate(model: type[_Model], raw: dict[str, Any], where: str) -> Any:
    """``model`` from ``raw``, or a one-line :class:`ConfigError` prefixed by ``where``."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(explain(exc, model, raw, where)) from None


def read_deployment(path: str | Path, *, overrides: dict[str, Any] | None = None) -> DeploymentFile:
    """The deployment file at ``path``; ``overrides`` replace its keys (``--insecure``)."""
    where = f"deployment file {str(path)!r}"
    raw = read_raw(path, "deployment file")
    return validate(DeploymentFile, {**raw, **(overrides or {})}, where)


def is_deployment(raw: dict[str, Any]) -> bool:
    """A ``--config`` file with ``[parties.<name>]`` tables is a deployment file."""
    return isinstance(raw.get("parties"), dict)


def read_run_file(path: str | Path, raw: dict[str, Any] | None = None) -> RunFile:
    """The options file of ``run --config`` (``raw``: its table, if already read)."""
    raw = read_raw(path, "config file") if raw is None else raw
    norm: dict[str, Any] = {}
    for k, v in raw.items():
        key = k.replace("-", "_")
        key = RunFile.SYNONYMS.get(key, key)
        if key in norm:
            raise ConfigError(f"config file {str(path)!r} gives {key!r} twice (as {k!r} too); keep one")
        norm[key] = v
    out = validate(RunFile, norm, f"config file {str(path)!r}")
    if out.method is not None and out.pipeline is not None:
        raise ConfigError(f"config file {str(path)!r} gives both method and pipeline; keep one")
    return out


def read_policy(path: str | Path, base: PartyPolicy | None = None) -> PartyPolicy:
    """The policy file of ``verticalfs party serve --policy FILE`` (policy keys at the top level or in
    a ``[policy]`` table): its keys replace those of ``base`` (the deployment file's); a relative
    ``model_dir`` is relative to the policy file."""
    p = Path(path)
    raw = read_raw(p, "policy file")
    if set(raw) == {"policy"} and isinstance(raw["policy"], dict):
        raw = raw["policy"]
    where = f"policy file {str(p)!r}"
    validate(PartyPolicy, raw, where)  # the file's own keys, named as the file gives them
    merged = {**(base or PartyPolicy()).model_dump(), **raw}
    out = validate(PartyPolicy, merged, where)
    if "model_dir" in raw and out.model_dir is not None and not out.model_dir.expanduser().is_absolute():
        out = out.model_copy(update={"model_dir": p.parent / out.model_dir.expanduser()})
    return out


def read_assignment(path: str | Path) -> dict[str, list[str]]:
    """The columns per party of an assignment file (``.toml`` or ``.json``)."""
    p = Path(path)
    if p.suffix.lower() not in (".toml", ".json"):
        raise ConfigError(f"assignment file {str(p)!r}: use a .toml or .json file")
    raw = read_raw(p, "assignment file")
    if "parties" not in raw:
        raw = {"parties": raw}
    return validate(AssignmentFile, raw, f"assignment file {str(p)!r}").columns()


# ------------------------------------------------------------------------------ errors
def _strip_optional(ann: Any) -> Any:
    if typing.get_origin(ann) in (Union, types.UnionType):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return ann


def _is_model(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _field_at(model: type[BaseModel], loc: tuple) -> FieldInfo | None:
    """The field of the last key of ``loc`` (``None`` if ``loc`` names no field)."""
    while loc:
        owner = _model_at(model, loc[:-1])
        if owner is not None and isinstance(loc[-1], str):
            return owner.model_fields.get(loc[-1])
        loc = loc[:-1]  # an index, or a table's own name (parties.<name>): the field holding it
    return None


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The model whose table is at ``loc`` (``()``: ``model`` itself)."""
    cur: Any = model
    for comp in loc:
        if _is_model(cur):
            info = cur.model_fields.get(comp) if isinstance(comp, str) else None
            if info is None:
                return None
            cur = _strip_optional(info.annotation)
        elif typing.get_origin(cur) in (dict, list):
            cur = _strip_optional(typing.get_args(cur)[-1])
        else:
            return None
    return cur if _is_model(cur) else None


def _raw_prefix(raw: Any, loc: tuple) -> tuple[list, Any]:
    """The longest prefix of ``loc`` present in ``raw`` and the value there."""
    keys, cur = [], raw
    for comp in loc:
        if isinstance(cur, dict) and comp in cur:
            cur = cur[comp]
        elif isinstance(cur, list) and isinstance(comp, int) and 0 <= comp < len(cur):
            cur = cur[comp]
        else:
            return keys, cur
        keys.append(comp)
    return keys, cur


def _dotted(keys: list) -> str:
    out = ""
    for k in keys:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else f"{k}")
    return out


def shown(v: Any) -> str:
    """A value as written in the file (TOML/JSON spelling), shortened."""
    if isinstance(v, dict):
        return "a table" if v else "an empty table"
    try:
        s = json.dumps(v, default=str)
    except (TypeError, ValueError):
        s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def describe(info: FieldInfo) -> str:
    """What a field takes, in words (the error messages' "expected ..." and the reference's type column)."""
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if "expects" in extra:
        return str(extra["expects"])
    inner = _expects_in(info.annotation)  # Annotated[...] carrying its own description (Address)
    if inner:
        return inner
    text = _type_words(info.annotation)
    bounds = []
    for m in info.metadata:
        for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("min_length", "length >="),
                          ("max_length", "length <=")):
            v = getattr(m, attr, None)
            if v is not None:
                bounds.append(f"{sym} {v}")
    return text + (f" ({', '.join(bounds)})" if bounds else "")


def _expects_in(ann: Any) -> str | None:
    ann = _strip_optional(ann)
    if typing.get_origin(ann) is Annotated:
        for m in typing.get_args(ann)[1:]:
            if isinstance(m, FieldInfo) and isinstance(m.json_schema_extra, dict) and "expects" in m.json_schema_extra:
                return str(m.json_schema_extra["expects"])
    return None


def _type_words(ann: Any) -> str:
    origin = typing.get_origin(ann)
    if origin is Annotated:
        return _type_words(typing.get_args(ann)[0])
    if origin in (Union, types.UnionType):
        parts = [_type_words(a) for a in typing.get_args(ann) if a is not type(None)]
        return " or ".join(dict.fromkeys(parts))
    if origin is Literal:
        vals = typing.get_args(ann)
        return ("one of " if len(vals) > 1 else "") + ", ".join(json.dumps(v) for v in vals)
    if origin is list:
        return f"a list of {_plural(typing.get_args(ann)[0])}"
    if origin is dict:
        return f"a table of name = {_type_words(typing.get_args(ann)[1])}"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            Path: "a path (a string)"}.get(ann, ann.__name__ if isinstance(ann, type) else str(ann))


def _plural(ann: Any) -> str:
    w = _type_words(ann)
    for a, p in (("a string", "strings"), ("an integer", "integers"), ("a number", "numbers"),
                 ("true or false", "booleans")):
        w = w.replace(a, p)
    return w


def explain(exc: ValidationError, model: type[BaseModel], raw: dict[str, Any], where: str) -> str:
    """One line for a :class:`ValidationError`: the first key at fault, what was given, what is expected."""
    problems: dict[str, str] = {}
    for e in exc.errors():
        loc = tuple(e["loc"])
        if e["type"] == "extra_forbidden":
            owner = _model_at(model, loc[:-1])
            key = _dotted(list(loc))
            valid = sorted(owner.model_fields) if owner is not None else []
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            problems.setdefault(key, f"unknown key {key!r}; {hint}valid keys here: {', '.join(valid)}")
            continue
        if e["type"] == "missing":
            key = _dotted(list(loc))
            info = _field_at(model, loc)
            expects = describe(info) if info is not None else "a value"
            problems.setdefault(key, f"missing key {key!r}: expected {expects}")
            continue
        # the key is the deepest one the file holds; a union's branch names are not keys
        keys, value = _raw_prefix(raw, loc)
        info = _field_at(model, tuple(keys))
        key = _dotted(keys)
        expects = describe(info) if info is not None else e["msg"].lower()
        problems.setdefault(key, f"{key} = {shown(value)}: expected {expects}")
    first, *rest = problems.values()
    more = f" (and {len(rest)} more: {', '.join(list(problems)[1:4])})" if rest else ""
    return f"{where}: {first}{more}"


# ------------------------------------------------------------------------------ reference page
def _default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    d = info.get_default(call_default_factory=True)
    if d is None:
        return "-"
    if isinstance(d, BaseModel):
        return "the table's defaults"
    if isinstance(d, Path):
        d = str(d)
    return f"`{json.dumps(d)}`" if not isinstance(d, (dict, list)) or d else "empty"


def _table(model: type[BaseModel], prefix: str = "") -> list[str]:
    rows = ["| key | type | default | description |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        desc = (info.description or "").replace("|", "\\|")
        kind = describe(info).replace("|", "/").replace("<", "&lt;").replace(">", "&gt;")
        rows.append(f"| `{prefix}{name}` | {kind} | {_default_text(info)} | {desc} |")
    return rows


def reference_markdown() -> str:
    """``docs/reference/configuration.md``: a table per kind of file, from the models above."""
    out = ["# Configuration files", "",
           "<!-- generated by `python -m verticalfs.configuration`; edit the models in "
           "src/verticalfs/configuration.py, not this page -->", "",
           "Every file is checked before anything is read or connected: unknown keys are refused (with the "
           "closest valid key), values must have the type shown (`true`/`false` are booleans, never strings; "
           "numbers are never quoted), and a problem is one line naming the file, the key, the value given "
           "and what is expected (exit code 2).", ""]
    sections = [
        ("Deployment file", "`verticalfs party serve --config deployment.toml` and "
         "`verticalfs run --config deployment.toml` (a file with `[parties.<name>]` tables). " + _doc(DeploymentFile),
         [(DeploymentFile, ""), (DeploymentParty, "parties.<name>."), (PartyPolicy, "parties.<name>.policy.")]),
        ("Party policy file", "`verticalfs party serve --config deployment.toml --name NAME --policy policy.toml`: "
         "the keys of a `[parties.<name>.policy]` table (at the top level or in a `[policy]` table), read only by "
         "that party; the keys it gives replace the deployment file's (the keys: the `[parties.<name>.policy]` "
         "table above). `party serve` prints the effective policy when it starts.", []),
        ("Options file", "`verticalfs run --config run.toml`. " + _doc(RunFile), [(RunFile, "")]),
        ("Assignment file", "`--assignment columns.toml`. " + _doc(AssignmentFile), [(AssignmentFile, "")]),
    ]
    for title, intro, models in sections:
        out += [f"## {title}", "", intro, ""]
        for m, prefix in models:
            if prefix:
                out += [f"Each `[{prefix[:-1]}]` table:", ""]
            out += _table(m, prefix) + [""]
    return "\n".join(out).rstrip() + "\n"


def _doc(model: type[BaseModel]) -> str:
    return " ".join((model.__doc__ or "").split())


if __name__ == "__main__":  # pragma: no cover - `python -m verticalfs.configuration [--write PATH]`
    text = reference_markdown()
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        Path(sys.argv[2]).parent.mkdir(parents=True, exist_ok=True)
        Path(sys.argv[2]).write_text(text)
    else:
        sys.stdout.write(text)
