"""The variant measured by this folder's A/Bs, patched into the engine: WhiFlash's default call with its EAGLE-3 rounds
as a chain alone runs them (every width, drafting on to the reach while sure), and each round's drafter chosen by
what each drafter's own rounds delivered (committed tokens over their wall time, in this router vote), not by
per-slot rates (which rounds that ran on only where the chain was sure bias). ``enable(True/False)`` switches it."""
import time

from hf_specgen.engine import loop
from hf_specgen.engine.width_policy import ACCEPTANCE_DECAY, AcceptanceEstimate, RoutedWidthPolicy

CARRIED_ROUNDS = 8.0  # at most this many rounds' worth of a drafter's delivered rounds carried into the next call

ON = {"value": False}
_orig = {name: getattr(RoutedWidthPolicy, name) for name in ("unsure_drafting_width", "_drafting_rates", "choose",
                                                              "observe")}
_orig_drafter_policy = loop.SpeculativeDecoder._drafter_policy


def enable(on: bool) -> None:
    ON["value"] = on


def _drafter_policy(self, proposer, width, session, show, acceptance, borrow=None, quick=False,
                    draft_fallback=None, rivals=False):
    return _orig_drafter_policy(self, proposer, width, session, show, acceptance, borrow, quick, draft_fallback,
                                rivals and not ON["value"])


def unsure_drafting_width(self, chosen):
    if not ON["value"]:
        return _orig["unsure_drafting_width"](self, chosen)
    return self.current.unsure_drafting_width(chosen)


def _drafting_rates(self):
    modelled = _orig["_drafting_rates"](self)
    if not ON["value"] or self._round_context is None:
        return modelled
    sums = {name: getattr(self.estimates[name][self._round_context], "delivered", None) for name in self.policies}
    if any(s is None or s[1] <= 0 for s in sums.values()):
        return modelled
    return {name: tokens / seconds for name, (tokens, seconds, _) in sums.items()}


def choose(self, copying=False):
    if self._round is None:
        self.prepare(copying)
    self._round_context = self._round[1]
    width = _orig["choose"](self, copying)
    self._chose_at, self._chose_context = time.perf_counter(), self._round_context
    self._round_context = None
    return width


def observe(self, width, accepted_per_row, seconds=None, within=None, rows=None):
    name = self.round_drafters[-1]
    if ON["value"] and width > 1 and name is not None and getattr(self, "_chose_at", None) is not None:
        spent = time.perf_counter() - self._chose_at
        tokens = 1 + sum(accepted_per_row) / len(accepted_per_row)
        estimate = self.estimates[name][self._chose_context]
        old_tokens, old_seconds, old_rounds = getattr(estimate, "delivered", None) or (0.0, 0.0, 0.0)
        estimate.delivered = (ACCEPTANCE_DECAY * old_tokens + tokens, ACCEPTANCE_DECAY * old_seconds + spent,
                              ACCEPTANCE_DECAY * old_rounds + 1)
    self._round_context = self._chose_context if ON["value"] else None
    _orig["observe"](self, width, accepted_per_row, seconds, within, rows)
    self._round_context = None


_orig_carried = AcceptanceEstimate.carried


def carried(self):
    copy = _orig_carried(self)
    delivered = getattr(self, "delivered", None)
    if delivered is not None:
        scale = min(1.0, CARRIED_ROUNDS / max(delivered[2], 1e-9))
        copy.delivered = tuple(x * scale for x in delivered)
    return copy


AcceptanceEstimate.carried = carried
AcceptanceEstimate.delivered = None
RoutedWidthPolicy._round_context = None
RoutedWidthPolicy.unsure_drafting_width = unsure_drafting_width
RoutedWidthPolicy._drafting_rates = _drafting_rates
RoutedWidthPolicy.choose = choose
RoutedWidthPolicy.observe = observe
loop.SpeculativeDecoder._drafter_policy = _drafter_policy
