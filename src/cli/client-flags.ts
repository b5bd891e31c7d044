/**
 * kubectl's client flags, meaning what they mean there: --request-timeout, --as,
 * --as-group, --as-uid and -v. Plain flags, not settings of the config file: they are
 * about one invocation, as in kubectl.
 */
import { InvalidArgumentError, Option, type Command } from 'commander'
import type { Impersonation } from '../kube/request-options.js'

/** What the transport takes from these flags (kube/client.ts kubeHttp). */
export interface ClientFlags {
  /** 0: no deadline. */
  requestTimeoutMs?: number
  impersonate?: Impersonation
}

const UNIT_MS: Readonly<Record<string, number>> = { ns: 1e-6, us: 1e-3, µs: 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 }
const DURATION = /^(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+$/

/**
 * kubectl's --request-timeout: a plain integer is seconds, else a Go duration ("30s",
 * "1m30s", "500ms"); 0 means no timeout. Milliseconds, rounded up (a tiny value still
 * gives a deadline).
 */
export function parseRequestTimeout(text: string): number {
  const value = text.trim()
  if (/^\d+$/.test(value)) return Number(value) * 1000
  if (!DURATION.test(value))
    throw new InvalidArgumentError('a duration: seconds as an integer, or a number with a unit (e.g. 30s, 1m, 1h, 500ms); 0 for none')
  let ms = 0
  for (const [, n, unit] of value.matchAll(/(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g)) ms += Number(n) * UNIT_MS[unit!]!
  return ms === 0 ? 0 : Math.max(1, Math.ceil(ms))
}

/** The log levels kubectl's -v numbers stand for, here: what a user sees at each. */
export const VERBOSITY_LEVELS = [
  { from: 0, level: 'warn' },
  { from: 2, level: 'info' },
  { from: 4, level: 'debug' },
  { from: 6, level: 'trace' },
] as const

/** -v N as a log level: 0-1 warn, 2-3 info, 4-5 debug, 6 and up trace (with a line per request). */
export function verbosityLevel(n: number): 'warn' | 'info' | 'debug' | 'trace' {
  let level: 'warn' | 'info' | 'debug' | 'trace' = 'warn'
  for (const v of VERBOSITY_LEVELS) if (n >= v.from) level = v.level
  return level
}

function parseVerbosity(text: string): number {
  if (!/^\d+$/.test(text.trim())) throw new InvalidArgumentError('a number from 0 (warnings) to 6 and up (every request)')
  return Number(text)
}

const collect = (value: string, previous: string[] | undefined): string[] => [...(previous ?? []), value]

/** Adds --request-timeout, --as, --as-group, --as-uid and -v to a command that talks to the API server. */
export function addClientFlags(cmd: Command): Command {
  return cmd
    .addOption(
      new Option(
        '--request-timeout <duration>',
        'how long a request to the API server may take, as kubectl: seconds, or 30s, 1m, 1h; 0 for no limit (watches are not cut)',
      ).argParser(parseRequestTimeout),
    )
    .addOption(new Option('--as <user>', 'act as this user (impersonation, as kubectl --as)'))
    .addOption(new Option('--as-group <group>', 'act with this group too, repeatable (needs --as)').argParser(collect))
    .addOption(new Option('--as-uid <uid>', 'act with this UID (needs --as)'))
    .addOption(
      new Option('-v, --verbosity <n>', 'log verbosity, as kubectl -v: 0 warnings, 2 info, 4 debug, 6 every request')
        .argParser(parseVerbosity)
        .conflicts('logLevel'),
    )
}

/** The transport's part of the parsed flags. */
export function clientFlags(opts: Record<string, unknown>): ClientFlags {
  const groups = opts['asGroup'] as string[] | undefined
  const user = opts['as'] as string | undefined
  const uid = opts['asUid'] as string | undefined
  const impersonate = user !== undefined || uid !== undefined || groups?.length ? { user, uid, groups } : undefined
  const timeout = opts['requestTimeout'] as number | undefined
  return { ...(timeout !== undefined ? { requestTimeoutMs: timeout } : {}), ...(impersonate ? { impersonate } : {}) }
}

/** -v as --log-level, for configFromOptions (undefined: -v not given). */
export function logLevelOf(opts: Record<string, unknown>): string | undefined {
  const v = opts['verbosity']
  return typeof v === 'number' ? verbosityLevel(v) : undefined
}
