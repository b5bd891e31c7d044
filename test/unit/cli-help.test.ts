/**
 * The help, generated from the one settings table (issue #36, item 4): every config-backed
 * flag shows its default and choices (read from the schema) and its env name, spelt one
 * way; lines fit 100 columns off a terminal; each command lists only the flags it uses;
 * and no default shown in the help becomes a value that would beat the config file.
 */
import t from 'tap'
import type { Command } from 'commander'
import { buildProgram } from '../../src/cli/program.js'
import { SETTINGS } from '../../src/config/settings.js'
import { settingChoices, settingDefault } from '../../src/config/setting-values.js'
import { CONFIG_DEFAULTS } from '../../src/config/schema.js'
import { MIGRATE_SETTINGS } from '../../src/cli/migrate/migrate.js'
import { STATUS_SETTINGS } from '../../src/cli/status/status.js'
import { CHECK_SETTINGS } from '../../src/cli/check/check.js'
import { PLAN_SETTINGS } from '../../src/cli/plan/plan.js'
import { VERSION_SETTINGS } from '../../src/cli/version/version.js'

/** Each command's list of settings, kept beside its flags. */
const COMMAND_SETTINGS = {
  migrate: MIGRATE_SETTINGS,
  status: STATUS_SETTINGS,
  check: CHECK_SETTINGS,
  plan: PLAN_SETTINGS,
  version: VERSION_SETTINGS,
}

const program = buildProgram()
const command = (name: string): Command => {
  const cmd = program.commands.find((c) => c.name() === name)
  if (!cmd) throw new Error(`no command ${name}`)
  return cmd
}
const help = (name: string) => command(name).helpInformation()
const longFlags = (name: string) =>
  command(name)
    .options.filter((o) => !o.hidden)
    .map((o) => o.long)

t.test('choices and defaults come from the schema', async (t) => {
  const rows: Array<[string, readonly string[] | undefined, string | undefined]> = [
    ['engine', ['own', 'builtin'], 'own'],
    ['log-level', ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], 'info'],
    ['log-format', ['json', 'text'], undefined],
    ['skip-phases', ['StorageVersionMigration', 'StashedObjectMigration', 'CleanupManagedFields'], undefined],
    ['storage-version-migrations-unmanaged', ['rewrite', 'refuse'], 'rewrite'],
    ['concurrency', undefined, String(CONFIG_DEFAULTS.migrator.concurrency)],
    ['max-parallel-crds', undefined, '4'],
    ['lossless-check', undefined, 'true'],
    ['break-glass-groups', undefined, 'system:masters'],
    ['kubeconfig', undefined, undefined],
  ]
  for (const [flag, choices, def] of rows) {
    const s = SETTINGS.find((x) => x.flag === flag)!
    t.same(settingChoices(s), choices, `${flag} choices`)
    t.equal(settingDefault(s), def, `${flag} default`)
  }
})

t.test('every config-backed flag: its default, its choices, its env name in one spelling', async (t) => {
  const text = help('serve')
  t.notMatch(text, /\[env /, 'no "[env ...]" spelling left')
  // serve has every setting but those of the command line alone (migrate's --progress-every).
  const flat = `${text} ${help('migrate')}`.replace(/\s+/g, ' ')
  for (const s of SETTINGS) {
    t.ok(flat.includes(`env: ${s.env}`), `--${s.flag} shows env: ${s.env}`)
    const def = settingDefault(s)
    if (def !== undefined) t.ok(flat.includes(`default: `) && flat.includes(def.split(',')[0]!), `--${s.flag} shows its default ${def}`)
    for (const c of settingChoices(s) ?? []) t.ok(flat.includes(`"${c}"`), `--${s.flag} shows choice ${c}`)
  }
  t.match(help('migrate').replace(/\s+/g, ' '), '--engine <value> who rewrites', 'engine is there')
  t.match(help('migrate').replace(/\s+/g, ' '), 'choices: "own", "builtin", default: "own", env: CRD_MIGRATOR_ENGINE')
  t.same(command('migrate').options.find((o) => o.long === '--engine')?.argChoices, ['own', 'builtin'], 'completion reads argChoices')
})

t.test('a default shown is not a value given: the config file and the environment still count', async (t) => {
  const cmd = command('migrate')
  // Flags of the command line alone (no setting behind them) may keep commander's false.
  const cliOnly = new Set(['dryRun', 'force'])
  for (const o of cmd.options) if (!cliOnly.has(o.attributeName())) t.equal(o.defaultValue, undefined, `${o.long} has no commander default`)
})

t.test('help lines fit 100 columns off a terminal', async (t) => {
  for (const name of ['serve', 'migrate', 'status', 'check', 'plan', 'version']) {
    // Only a single word too long to break may pass the width (a default such as a ServiceAccount's username).
    const long = help(name)
      .split('\n')
      .filter((l) => l.length > 100 && /\s/.test(l.trim()))
    t.same(long, [], `${name} --help`)
  }
  const top = program.helpInformation()
  t.same(
    top.split('\n').filter((l) => l.length > 100),
    [],
    'the top-level help',
  )
})

t.test('each command lists the flags it uses, no other', async (t) => {
  const serveOnly = [
    '--webhook',
    '--webhook-host',
    '--webhook-port',
    '--webhook-max-connections',
    '--tls-cert',
    '--metrics-port',
    '--storage-version-migrations',
    '--storage-version-migrations-unmanaged',
    '--ksvm-trigger',
    '--ksvm-trigger-poll-seconds',
    '--leader-elect',
    '--resync-seconds',
    '--migrator-users',
    '--builtin-migrator-users',
  ]
  for (const name of ['migrate', 'status', 'check', 'plan', 'version']) {
    const flags = longFlags(name)
    for (const f of serveOnly) t.notOk(flags.includes(f), `${name} has no ${f}`)
    const settingsFlags = SETTINGS.filter((s) => flags.includes(`--${s.flag}`)).map((s) => s.flag)
    t.same(settingsFlags.sort(), [...COMMAND_SETTINGS[name as keyof typeof COMMAND_SETTINGS]].sort(), `${name}: the settings of its list`)
  }
  for (const name of ['migrate', 'status', 'check', 'plan', 'version'])
    for (const f of ['--request-timeout', '--as', '--as-group', '--as-uid', '--verbosity'])
      t.ok(longFlags(name).includes(f), `${name} has ${f}`)
  t.ok(longFlags('serve').includes('--webhook-max-connections'), 'serve keeps its own')
  t.equal(command('status').options.find((o) => o.long === '--selector')?.short, '-l', '-l is --selector')
})

t.test('check --help describes no writes; the top level says CRDs run in parallel', async (t) => {
  // --fix (manifest files) and its --dry-run are the one exception, and say so.
  const text = help('check')
    .replace(/\s+/g, ' ')
    .replace(/--fix with --manifests:.*?--dry-run with --fix:.*?write nothing/, '')
  t.notMatch(text, /\bwrit(e|es|ing)\b/i, 'no write described')
  const top = program.helpInformation().replace(/\s+/g, ' ')
  t.notMatch(top, /one after the other/)
  t.match(top, /--max-parallel-crds \(default 4\) at once/)
})
