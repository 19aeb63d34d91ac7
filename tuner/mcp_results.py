"""The typed results of the tensor-plan MCP tools: one pydantic model per tool, published as its
``outputSchema`` and validated by the SDK before a result leaves the server.

Cycles are ``best_cycles`` of the cycle model (lower is better; ``None`` where a plan is infeasible);
``dev`` is the fast objective, ``final`` the held-out authority. No extra keys are allowed, so a
result that drifts from its schema is a failing test, not a surprise for a client.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

Plan = dict[str, str | int | float]           # knob name -> value
Cycles = int | float | None                   # best_cycles (lower is better); None: infeasible
CandidateReason = Annotated[str | None, Field(description="why the candidate had no value in the mode (an infeasible plan)")]
AgainstReason = Annotated[str | None, Field(description="why the plan it is compared with had no value in the mode")]
Unreadable = Annotated[dict[str, str] | None, Field(description="fixtures left out, each with why it cannot be read as a plan")]


class Strict(BaseModel):
    """No extra keys; dumps only the keys the result had (an optional field it lacked stays absent)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_serializer(mode="wrap")
    def _given_keys_only(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        given = {field.alias or name for name, field in type(self).model_fields.items() if name in self.model_fields_set}
        return {key: value for key, value in data.items() if key in given}


class Case(Strict):
    name: str
    cycles: Cycles
    max_abs: float | None
    components: dict[str, int | float] = Field(default_factory=dict, description="cycles per trace component")


class Report(Strict):
    """``benchmark.py --json`` of a plan in one mode."""

    mode: str
    plan_hash: str
    tolerance: float
    feasible: bool
    best_cycles: Cycles
    correct: bool = Field(description="max_abs <= tolerance")
    max_abs: float | None
    cases: list[Case]
    reason: str | None = Field(None, description="why the plan is infeasible")


class RunObjectiveResult(Report):
    plan_source: str


class Share(Strict):
    cycles: int | float
    share: float


class Hotspot(Strict):
    case: str
    share: float


class TraceCase(Case):
    dominant: str


class TraceSummaryResult(Strict):
    plan_source: str
    feasible: bool = True
    reason: str | None = None
    mode: str | None = None
    best_cycles: Cycles = None
    correct: bool | None = None
    components: dict[str, Share] | None = None
    hotspot: Hotspot | None = None
    cases: list[TraceCase] | None = None
    indicators: dict[str, dict[str, Any]] | None = Field(None, description="per case: conflicts, pressure, DMA, notes")
    findings: list[str] | None = None


class ValidatePlanResult(Strict):
    valid: bool
    error: str | None = None
    plan_source: str | None = None
    plan_hash: str | None = None
    plan: Plan | None = None
    feasible: dict[str, bool] | None = None
    reasons: dict[str, str] | None = None


class Candidate(Strict):
    """A scored plan: ``dev`` and ``correct`` always; ``final`` where the winners were checked in final mode."""

    plan_hash: str
    plan: Plan
    dev: Cycles
    correct: bool
    final: Cycles = None
    final_correct: bool | None = None


class SearchResult(Strict):
    study: str
    strategy: str
    target: str
    mode: str
    evaluations: int
    new_evaluations: int
    trials: int
    cached: int
    seconds: float
    stopped: str = Field(description="why the search ended (budget, time, converged, exhausted, cancelled)")
    failed: int = Field(description="new evaluations without a value (infeasible, incorrect, failed runs, not measured)")
    failure_reasons: dict[str, int] = Field(description="their most common reasons (on one line, first 100 characters), with counts")
    cached_failed: int = Field(description="configurations the history holds as failed (an earlier run's or another study's "
                                           "evaluations): not measured again, so a failure the environment caused stays")
    best: Candidate | None
    top: list[Candidate]


class LocalSearchResult(SearchResult):
    start: str


class ExhaustiveSearchResult(SearchResult):
    profile: str
    profile_description: str = Field(description="what the profile holds, as its file describes it (empty where the file does not)")
    profile_size: int


class PlanRow(Strict):
    source: str
    plan_hash: str
    plan: Plan | None = None
    dev: Cycles
    final: Cycles = Field(description="None where infeasible, or for a history plan that no search checked in final mode "
                                      "(the gate measures a plan before it applies it)")
    correct: bool


class Sweep(Strict):
    study_name: str
    strategy: str
    target: str
    mode: str
    state: str = Field(description="running (a live process is at it), lost (recorded as running, but no live process is at it: "
                                   "killed, or its machine went down), stopped (it ended on its budget or time), cancelled, "
                                   "or done (converged or exhausted); all but done resume")
    evaluations: int
    updated: str


class ResumeResult(Strict):
    seeds: list[PlanRow]
    searches: list[Sweep]
    profiles_not_swept: list[str]
    unreadable_fixtures: Unreadable = None
    other_objectives: Annotated[dict[str, int] | None, Field(description="studies the history holds of other objectives, by "
                                                                          "objective (another problem, or an earlier model)")] = None


class Change(Strict):
    from_: str | int | float = Field(alias="from")
    to: str | int | float


class Delta(Strict):
    from_: Cycles = Field(alias="from")
    to: Cycles
    speedup: float | None
    candidate_reason: CandidateReason = None
    against_reason: AgainstReason = None


class CandidateDiffResult(Strict):
    candidate: str
    against: str
    changes: dict[str, Change]
    metrics: dict[str, Delta]
    candidate_correct: dict[str, bool]


class BenchmarkPlanResult(Strict):
    plan_source: str
    plan_hash: str
    reports: dict[str, Report]
    correct_in_all: bool
    best_cycles: dict[str, Cycles]
    repeated: dict[str, Summary] | None = Field(None, description="with repeats: per mode median, spread and interval")


class RepeatedMode(Strict):
    candidate: Summary
    candidate_correct: bool
    against: Summary
    against_correct: bool
    candidate_reason: CandidateReason = None
    against_reason: AgainstReason = None
    comparison: Significance | None = None


class RepeatedEvaluationResult(Strict):
    candidate: str
    against: str
    repeats: int
    modes: dict[str, RepeatedMode]


class Metrics(Strict):
    best_cycles: Cycles = Field(description="the value; with repeats, the median")
    correct: bool
    max_abs: float | None
    samples: list[Cycles] | None = Field(None, description="every measured value (with repeats)")
    reason: str | None = Field(None, description="why a run had no value (an infeasible plan), where the objective says")


class Summary(Strict):
    """Repeated measurements of one plan in one mode."""

    samples: int
    median: float | None
    spread: float | None = Field(description="max/min - 1 of the samples")
    low: float | None = Field(description="the median's 95% bootstrap interval")
    high: float | None


class Significance(Strict):
    """Whether the candidate is significantly faster: the bootstrap interval of the ratio of medians lies below 1."""

    mode: str | None = None
    ratio: float
    low: float
    high: float
    confidence: float
    better: bool
    test: str


class GateResult(Strict):
    """The gate's verdict; ``applied`` only with ``dry_run`` false and a pass (``backup``: the replaced plan)."""

    candidate_source: str | None = None
    passed: bool
    reasons: list[str]
    dry_run: bool
    applied: bool
    candidate_hash: str | None = None
    current_hash: str | None = None
    candidate: dict[str, Metrics] | None = None
    current: dict[str, Metrics] | None = None
    diff: dict[str, Change] | None = None
    backup: str | None = None
    significance: Significance | None = Field(None, description="with repeats: the final-mode comparison the gate required")
    current_is_best: bool | None = Field(None, description="apply_best_verified: the plan already is the best verified one, "
                                                           "so there is nothing to apply")


class ExportResult(Strict):
    fixture: str
    path: str
    backup: str | None = Field(description="the replaced fixture's backup (overwrite=true only)")
    metrics: dict[str, Metrics]


class CompareResult(Strict):
    rows: list[PlanRow]
    best_verified: PlanRow | None
    current_is_best: bool
    unreadable_fixtures: Unreadable = None


class Ranked(Strict):
    rank: int
    study: str
    plan_hash: str
    dev: Cycles
    final: Cycles
    evaluations: int = Field(description="the study's evaluations, failed ones included, as its search counted them")


class RankResult(Strict):
    ranking: list[Ranked]


class ResultMetrics(Strict):
    best_cycles: Cycles
    score: Cycles = Field(description="equal to best_cycles in final mode")
    correct: bool
    max_abs: float | None
    dev_best_cycles: Cycles


class RecordResult(Strict):
    path: str
    backup: str | None = Field(description="the replaced earlier result's backup")
    metrics: ResultMetrics
    mode: str
    plan_hash: str
    plan: Plan
    used_harness_tools: list[str]
    used_harness_artifacts: list[str]
