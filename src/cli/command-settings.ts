/**
 * Which config-backed flags each command has: the settings it reads, and no other (a
 * serve-only flag in `migrate --help` would promise what migrate does not do). `serve`
 * has them all. test/unit/cli-help.test.ts checks each command's help shows exactly
 * its list, and no serve-only flag.
 */
import { SETTINGS } from '../config/settings.js'

/** Where, as whom and how patiently to talk to the API server, and the log. */
const CLIENT = ['kubeconfig', 'context', 'connect-attempts', 'log-level', 'log-format'] as const

export const COMMAND_SETTINGS = {
  migrate: [
    ...CLIENT,
    'migrating-annotation',
    'selector',
    'concurrency',
    'qps',
    'max-parallel-crds',
    'page-size',
    'max-attempts',
    'skip-phases',
    'stash-presets',
    'lossless-check',
    'accept-removals',
    'accept-changes',
    'accept-unchecked',
    'consent-annotations',
    'rewrite-served-managed-fields',
    'conversion-outage-limit-seconds',
    'apiserver-endpoints',
    'storage-switch-timeout-seconds',
    'engine',
    'builtin-start-timeout-seconds',
    'conversion-wait-seconds',
    'progress-interval-seconds',
    'progress-every',
    'takeover-after-seconds',
    'state-key-file',
    'strict-state-key-file',
  ],
  status: [...CLIENT, 'migrating-annotation', 'selector', 'crds'],
  check: [
    ...CLIENT,
    'migrating-annotation',
    'selector',
    'crds',
    'stash-presets',
    'page-size',
    'max-attempts',
    // --drop runs the migration's lossless check, with the same consent as migrate.
    'accept-removals',
    'accept-changes',
    'accept-unchecked',
    'consent-annotations',
  ],
  plan: [
    ...CLIENT,
    'selector',
    'crds',
    'skip-phases',
    'rewrite-served-managed-fields',
    'max-parallel-crds',
    // plan runs the lossless check the run makes, with the same consent.
    'lossless-check',
    'accept-removals',
    'accept-changes',
    'accept-unchecked',
    'consent-annotations',
    // plan --measure writes (dry run) as the migration would.
    'concurrency',
    'qps',
    'page-size',
    'max-attempts',
  ],
  version: ['kubeconfig', 'context', 'connect-attempts'],
  // The chart's pre-delete hook: the Lease (its renew deadline and retry period from --config) and the freeze's key.
  'lift-freezes': [...CLIENT, 'migrating-annotation', 'lease-namespace', 'lease-name'],
} as const satisfies Record<string, readonly string[]>

/** Settings of the command line only: serve has every other. */
const CLI_ONLY = new Set(['progress-every'])
export const SERVE_SETTINGS: readonly string[] = SETTINGS.map((s) => s.flag).filter((flag) => !CLI_ONLY.has(flag))

/** The short commands (all but serve) log warnings only unless told: their output is the table, the summary. */
export const SHORT_COMMAND_DEFAULTS: Readonly<Record<string, string | null>> = { 'log-level': 'warn' }

/** migrate acts on the CRDs -l selects only when given -l, never on the configured selection. */
export const MIGRATE_DESCRIPTIONS: Readonly<Record<string, string>> = {
  selector: 'migrate the CRDs this label selector matches, instead of naming them (as kubectl -l)',
}

/**
 * The read-only commands (status, check, plan) write nothing, so their help does not
 * describe a setting by the writes of `migrate`: what the setting means for them instead.
 */
export const READ_ONLY_DESCRIPTIONS: Readonly<Record<string, string>> = {
  'max-attempts': 'tries per request (a list page, a read) before it counts as failed',
  'stash-presets': 'also look at copies of CRs stashed in other objects, by preset',
  'skip-phases': 'phases not to count as work',
  'rewrite-served-managed-fields': 'count managedFields of served non-storage versions as work too',
  'max-parallel-crds': 'CRDs a migration would run at once, for the estimate',
}
