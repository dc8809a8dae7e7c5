"""The KV store's interfaces: what every engine promises.

One contract per module, each with its value types and checks:
:mod:`.log` (the message log and the notifier), :mod:`.stats` (statsvr's
tables), :mod:`.operators` (sect records, the start and end of a broadcast),
:mod:`.counters` (likes and gifts), :mod:`.moderation` (mutes, bans, slow
mode and their audit), :mod:`.review` (held messages waiting for a
moderator), :mod:`.filters` (the word filter's lists) and :mod:`.outbox`
(the webhooks' events waiting for delivery). This module holds
the :class:`Store` that reaches them all, and re-exports everything they
define: callers import it from here.

Two engines implement them side by side: :mod:`.memory` (the embedded default,
one process) and :mod:`.redis` (many processes and hosts, Redis or Redis
Cluster). One contract test suite (``tests/store/test_store_contract.py``) runs against
both, so the memory engine is a faithful stand-in.

Every method may raise :class:`~liveroom.errors.StoreUnavailable` and nothing
else from the driver.
"""

from __future__ import annotations

from typing import Protocol

from .counters import GIFT_VALUE_MAX as GIFT_VALUE_MAX
from .counters import RANKING_KEPT as RANKING_KEPT
from .counters import RANKING_MAX as RANKING_MAX
from .counters import RENEWALS_KEPT as RENEWALS_KEPT
from .counters import ROOT_MOVED as ROOT_MOVED
from .counters import SCORE_EXACT as SCORE_EXACT
from .counters import Counters as Counters
from .counters import GiftRank as GiftRank
from .counters import Ranking as Ranking
from .counters import bucket_horizon as bucket_horizon
from .counters import bucket_start as bucket_start
from .counters import check_gift as check_gift
from .counters import check_limit as check_limit
from .counters import check_taps as check_taps
from .filters import FILTER_ACTIONS as FILTER_ACTIONS
from .filters import FILTER_ROOMS_MAX as FILTER_ROOMS_MAX
from .filters import FilterLimits as FilterLimits
from .filters import FiltersFull as FiltersFull
from .filters import FilterStore as FilterStore
from .filters import WordList as WordList
from .filters import check_filter_name as check_filter_name
from .filters import check_filter_version as check_filter_version
from .filters import check_list as check_list
from .filters import made_list as made_list
from .log import PERSONAL_PULL as PERSONAL_PULL
from .log import AppendAtOnce as AppendAtOnce
from .log import Appended as Appended
from .log import LogPolicy as LogPolicy
from .log import MessageLog as MessageLog
from .log import Notifier as Notifier
from .log import OnNotify as OnNotify
from .log import OnResync as OnResync
from .log import Pulled as Pulled
from .log import PullRequest as PullRequest
from .log import Recalled as Recalled
from .log import new_epoch as new_epoch
from .moderation import AUDIT_KEPT as AUDIT_KEPT
from .moderation import JOURNAL_PRUNED as JOURNAL_PRUNED
from .moderation import MODERATION_ACTIONS as MODERATION_ACTIONS
from .moderation import REASON_MAX as REASON_MAX
from .moderation import SANCTION_SECONDS_MAX as SANCTION_SECONDS_MAX
from .moderation import SANCTIONED_BY_ROLE as SANCTIONED_BY_ROLE
from .moderation import SANCTIONS_MAX as SANCTIONS_MAX
from .moderation import AuditEntry as AuditEntry
from .moderation import ModerationStore as ModerationStore
from .moderation import RoomModeration as RoomModeration
from .moderation import Sanction as Sanction
from .moderation import SanctionsFull as SanctionsFull
from .moderation import check_act as check_act
from .moderation import check_audit_limit as check_audit_limit
from .moderation import check_room as check_room
from .moderation import check_since as check_since
from .moderation import in_force as in_force
from .moderation import moderation_lives_ms as moderation_lives_ms
from .moderation import sanction_until as sanction_until
from .operators import Ended as Ended
from .operators import Operators as Operators
from .operators import PastBroadcast as PastBroadcast
from .operators import Started as Started
from .operators import VipSwap as VipSwap
from .outbox import EVENT_ID_MAX as EVENT_ID_MAX
from .outbox import FAILED_LIST_MAX as FAILED_LIST_MAX
from .outbox import FAILED_MAX as FAILED_MAX
from .outbox import MOVE_MAX as MOVE_MAX
from .outbox import MOVED_KEPT_MS as MOVED_KEPT_MS
from .outbox import OUTBOX_MAX as OUTBOX_MAX
from .outbox import Failed as Failed
from .outbox import Moving as Moving
from .outbox import Outbox as Outbox
from .outbox import Outgoing as Outgoing
from .outbox import check_event_id as check_event_id
from .outbox import check_failed_limit as check_failed_limit
from .review import KINDS as KINDS
from .review import LIST_MAX as LIST_MAX
from .review import REVIEW_MAX as REVIEW_MAX
from .review import VERDICTS as VERDICTS
from .review import WHY_MAX as WHY_MAX
from .review import Held as Held
from .review import Holding as Holding
from .review import ReviewStore as ReviewStore
from .review import Verdict as Verdict
from .review import check_find as check_find
from .review import check_held_list as check_held_list
from .review import check_hold as check_hold
from .review import check_id as check_id
from .review import check_settle as check_settle
from .review import check_verdict as check_verdict
from .review import held_kind as held_kind
from .stats import RANKED_ROOMS_MAX as RANKED_ROOMS_MAX
from .stats import SERIES_RESOLUTIONS as SERIES_RESOLUTIONS
from .stats import Announcement as Announcement
from .stats import NodeLoad as NodeLoad
from .stats import NodeState as NodeState
from .stats import OnlineSample as OnlineSample
from .stats import RankedRoom as RankedRoom
from .stats import SeriesRow as SeriesRow
from .stats import ShardEntry as ShardEntry
from .stats import ShardWrite as ShardWrite
from .stats import StatsStore as StatsStore
from .stats import ViewersState as ViewersState
from .stats import biggest as biggest
from .stats import series_horizon_ms as series_horizon_ms


class Store(Protocol):
    """An engine: the message log, the notifier and shared values, with a lifecycle."""

    name: str

    # Read-only members, so an engine may declare its own concrete classes.
    @property
    def log(self) -> MessageLog: ...

    @property
    def notifier(self) -> Notifier: ...

    @property
    def stats(self) -> StatsStore: ...

    @property
    def operators(self) -> Operators: ...

    @property
    def counters(self) -> Counters: ...

    @property
    def moderation(self) -> ModerationStore: ...

    @property
    def review(self) -> ReviewStore: ...

    @property
    def filters(self) -> FilterStore: ...

    @property
    def outbox(self) -> Outbox: ...

    async def start(self) -> None:
        """Connect and start background tasks (notify listener, probes, expiry)."""

    async def close(self) -> None:
        """Stop background tasks and disconnect."""

    async def ping(self) -> None:
        """Raise StoreUnavailable unless the store answers now."""
