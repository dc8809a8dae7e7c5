// Typings of liveroom.js, the client of liveroom's HTTP API (v1).

/** A message as a poll answers it. */
export interface Message {
  /** Its place in the room's one sequence (normal and important together). */
  seq: number;
  uid: string;
  important: boolean;
  /** When it was stored, in ms since the epoch. */
  ts: number;
  /** Any JSON value the sender sent; null once recalled. */
  body: unknown;
  /** Present (true) on a recalled message: its tombstone, body null. */
  recalled?: true;
  /** What the backend's send hook attached to it (a small object); absent: nothing. */
  extra?: Record<string, unknown>;
}

/** A message for one listener alone (sent with "to": its uid); always important. */
export interface PersonalMessage {
  /** Its place in the room's personal sequence (apart from seq). */
  pseq: number;
  /** Its ordinal among this listener's personal messages in the room (1, 2, ...). */
  n: number;
  /** Who sent it. */
  uid: string;
  to: string;
  important: true;
  ts: number;
  /** null once recalled (then `recalled` is true). */
  body: unknown;
  /** Present when the message was recalled: its body is gone. */
  recalled?: true;
  /** What the backend's send hook attached to it (a small object); absent: nothing. */
  extra?: Record<string, unknown>;
}

/** One giver of a ranking. */
export interface Giver {
  uid: string;
  /** The sum of the giver's gifts in the broadcast. */
  score: number;
}

/** The room's top givers in its current broadcast, as an answer carries them. */
export interface Ranking {
  /** A checksum of top, the same on every node: the next polls echo it (?ranking=). */
  version: number;
  /** At most 3, best first; empty once the broadcast ended. */
  top: Giver[];
}

/** A poll's answer (docs/api.md, "Listening"). */
export interface PollAnswer {
  room: string;
  epoch: string;
  seq: number;
  iseq: number;
  important: Message[];
  messages: Message[];
  /** Normal messages missed (evicted, or beyond the 500 of one answer). */
  gap: number;
  /** Important messages missed. */
  igap: number;
  /** The cursors no longer fitted the room: this answer is like a first poll. */
  reset: boolean;
  ctx: string;
  online: number;
  /** The room's likes in its current broadcast (never down within it). */
  likes: number;
  /** The longest the server may hold a poll to pace this room (its tier). */
  interval_ms: number;
  /** In a vip room only: the routing hint the next poll echoes (?spread=). */
  spread?: number;
  /** The personal cursor the next poll echoes (?pseq=). */
  pseq: number;
  /** This listener's own messages, only when there are some. */
  personal?: PersonalMessage[];
  /** Its own messages missed (gone before it came back), only when some were. */
  pgap?: number;
  /** The room's top givers, only when they changed since the version the poll echoed. */
  ranking?: Ranking;
  /** Seqs of messages recalled since the cursor (remove or mark them), only when some were. */
  recalled?: number[];
  /** Pseqs of this listener's personal messages recalled since its personal cursor, only when some were. */
  precalled?: number[];
  /** In a slow room only: seconds a uid waits between two normal messages. */
  slow?: number;
}

/** The listener's place in the room; passed back on every poll. */
export interface Cursor {
  epoch: string;
  seq: number;
  iseq: number;
  ctx: string;
  pseq: number;
}

/** A room's figures (GET /v1/rooms/{room}/stats). */
export interface RoomStats {
  room: string;
  online: number;
  viewers: number;
  viewers_exact: boolean;
  vip: boolean;
  seq: number;
  likes: number;
}

/** A ticket (or token) sent as `Authorization: Bearer`; a function is asked before every request. */
export type Ticket = string | null | undefined | (() => string | null | undefined | Promise<string | null | undefined>);

/** What every call may take. */
export interface ClientOptions {
  /** The server's URL, like "http://127.0.0.1:8080". Default: the page's own origin. */
  base?: string;
  /** Open mode: the uid to speak as. With a ticket, leave it out (or name the ticket's). */
  uid?: string;
  /** A ticket your backend signed; to send important messages, the publisher token. */
  ticket?: Ticket;
  /** The fetch to use (default: globalThis.fetch). */
  fetch?: typeof fetch;
}

export interface ListenOptions extends ClientOptions {
  /** Seconds the server holds a poll with nothing to say (1-60, default 25). */
  timeout?: number;
  /** Normal messages a first poll (or a reset) brings (0-100, server default 20). */
  recent?: number;
  /** This listener's own personal messages; runs before onImportant. */
  onPersonal?: (messages: PersonalMessage[], answer: PollAnswer) => void;
  /** Important messages of an answer; runs before onMessages. */
  onImportant?: (messages: Message[], answer: PollAnswer) => void;
  /** Normal messages of an answer. */
  onMessages?: (messages: Message[], answer: PollAnswer) => void;
  /** Messages were missed (before the ones of this answer). */
  onGap?: (missed: { gap: number; igap: number; pgap: number }, answer: PollAnswer) => void;
  /** The room's log restarted (a new epoch) or the cursor no longer fitted. */
  onReset?: (answer: PollAnswer) => void;
  /** The room's likes changed (and with the first answer); runs first. */
  onLikes?: (likes: number, answer: PollAnswer) => void;
  /** The room's top givers changed (an answer carried them); runs after onLikes. */
  onRanking?: (ranking: Ranking, answer: PollAnswer) => void;
  /** The room's slow mode changed (seconds; 0: lifted); runs after onRanking. */
  onSlow?: (seconds: number, answer: PollAnswer) => void;
  /** Messages were recalled (their seqs): remove or mark them; runs after onGap, before onPersonal. */
  onRecall?: (seqs: number[], answer: PollAnswer) => void;
  /** This listener's personal messages were recalled (their pseqs): remove or mark them; runs after onRecall. */
  onPersonalRecall?: (pseqs: number[], answer: PollAnswer) => void;
  /** Every answer, after the callbacks above. */
  onAnswer?: (answer: PollAnswer) => void;
  /** A failure; retryInMs is when the next try comes, null when the loop stopped. */
  onError?: (error: LiveroomError, retryInMs: number | null) => void;
}

export interface SendOptions extends ClientOptions {
  /** Needs the publisher token, or a ticket with "publish". */
  important?: boolean;
  /** A personal message for this uid alone (important; the same rights). */
  to?: string;
  /** Makes a retried send safe; made up when retries > 0 and none is given. */
  clientMsgId?: string;
  /** Tries after the first, for network errors, 5xx, 429 and 503 (default 2). */
  retries?: number;
  /**
   * Longest Retry-After (seconds) worth waiting for; beyond, the error is thrown (default 10).
   * A slow room's refusal is a 429 whose Retry-After is the wait: 0 shows it at once.
   */
  maxWait?: number;
  /** Seconds to wait for an answer (default 15). */
  readTimeout?: number;
  signal?: AbortSignal;
}

export interface RecallOptions extends ClientOptions {
  /** Tries after the first, for network errors, 5xx, 429 and 503 (default 2): a recall is idempotent. */
  retries?: number;
  /** Longest Retry-After (seconds) worth waiting for (default 10). */
  maxWait?: number;
  /** Seconds to wait for an answer (default 15). */
  readTimeout?: number;
  signal?: AbortSignal;
}

/** A recall's answer. */
export interface Recalled {
  room: string;
  seq: number;
  /** Who had sent it. */
  uid: string;
  recalled: true;
  /** The seq of the recall's notice (an important entry listeners read as `recalled`). */
  notice: number;
}

export interface StatsOptions {
  base?: string;
  fetch?: typeof fetch;
  readTimeout?: number;
  signal?: AbortSignal;
}

export class LiveroomError extends Error {
  constructor(status: number, code: string, message: string, retryAfter?: number | null);
  /** HTTP status; 0 when no answer came. */
  readonly status: number;
  /** The server's error code ("rate_limited", "unauthorized", ...), or "network", "timeout", "bad_answer", "ticket" (the ticket function failed). */
  readonly code: string;
  /** Seconds from Retry-After, when the server sent it. */
  readonly retryAfter: number | null;
  /** No answer, 408, 429 or a 5xx. */
  readonly temporary: boolean;
}

export class Listener {
  constructor(room: string, options?: ListenOptions);
  readonly room: string;
  readonly options: ListenOptions;
  /** Null before the first answer. */
  readonly cursor: Cursor | null;
  /** The room's interval_ms from the last answer. */
  readonly intervalMs: number | null;
  /** The room's online count from the last answer. */
  readonly online: number | null;
  /** The room's likes from the last answer. */
  readonly likes: number | null;
  /** The room's top givers from the last answer that carried them (its version echoed). */
  readonly ranking: Ranking | null;
  /** A vip room's routing hint from the last answer (echoed); null: none. */
  readonly spread: number | null;
  /** The room's slow mode from the last answer, in seconds; 0: off (and before an answer). */
  readonly slow: number;
  readonly running: boolean;
  /** Resolves when the loop ends: null after stop(), else the error that stopped it. */
  readonly closed: Promise<LiveroomError | null>;
  /** Start polling (again after a stop: from the cursor it had, first running the rest of
   * the last answer's callbacks when a stop() inside one of them cut it short). */
  start(): this;
  /** Stop: the poll in flight is aborted; no callback runs after this returns. */
  stop(): void;
}

export function listen(room: string, options?: ListenOptions): Listener;
/** A send kept back for review (202): its id in the room's review queue; not stored yet. */
export interface Held { held: string; seq?: undefined; epoch?: undefined }
export function send(room: string, body: unknown, options?: SendOptions): Promise<{ seq: number; epoch: string } | Held>;
export function roomStats(room: string, options?: StatsOptions): Promise<RoomStats>;
/**
 * Recall message `seq`: its sender within the server's window (its ticket, or `uid` in open
 * mode), or the publisher or admin token (or a ticket that may publish) any message.
 */
export function recall(room: string, seq: number, options?: RecallOptions): Promise<Recalled>;
export interface LikeOptions extends ClientOptions {
  /** Seconds to wait for an answer (default 15). */
  readTimeout?: number;
  signal?: AbortSignal;
}
/** Tap `count` (1-100) likes; resolves with the room's total as the node knows it. */
export function like(room: string, count?: number, options?: LikeOptions): Promise<number>;
