/**
 * The CLI's usage, as kubectl users expect it (issue 46, item 6): a usage error is the
 * message and where the help is, not the help; `--flag=true|false` for boolean flags;
 * the off form of a flag in help (`--[no-]webhook`); the everyday flags first; and every
 * command's Examples, each naming only flags the command has.
 */
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import t from 'tap'
import { EXAMPLES } from '../../src/cli/examples.js'
import { buildProgram, rewriteBooleanValues, withBooleanValues } from '../../src/cli/program.js'

const run = promisify(execFile)
const cli = (...args: string[]) =>
  run(process.execPath, ['dist/cli/main.js', ...args]).then(
    (r) => ({ code: 0, ...r }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }),
  )

t.test('rewriteBooleanValues: --x=true|false into the forms commander takes', async (t) => {
  const flags = [
    { long: '--fix', negate: false },
    { long: '--webhook', negate: false },
    { long: '--no-webhook', negate: true },
    { long: '--no-scan', negate: true },
  ]
  const rows: [string[], string[], string][] = [
    [['--fix=true'], ['--fix'], 'true: the flag'],
    [['--fix=false'], [], 'false, no negative form: off by default, dropped'],
    [['--webhook=false'], ['--no-webhook'], 'false with a negative form: it'],
    [['--webhook=TRUE'], ['--webhook'], 'case-insensitive, as pflag'],
    [['--scan=false'], ['--no-scan'], 'a flag defined only as --no-x'],
    [['--scan=true'], [], 'its default: dropped'],
    [['--other=false', '--fix=maybe'], ['--other=false', '--fix=maybe'], 'anything else is left for commander to judge'],
    [['x', '--', '--fix=false'], ['x', '--', '--fix=false'], 'after --, arguments'],
  ]
  for (const [args, want, why] of rows) t.same(rewriteBooleanValues(args, flags), want, why)
  t.same(
    withBooleanValues(buildProgram(), ['node', 'main.js', 'serve', '--migrator=false', '--webhook=true']),
    ['node', 'main.js', 'serve', '--no-migrator', '--webhook'],
    "serve's own flags",
  )
})

t.test('examples: every flag they name exists on their command', async (t) => {
  const program = buildProgram()
  for (const [command, rows] of Object.entries(EXAMPLES)) {
    const cmd = program.commands.find((c) => c.name() === command)
    t.ok(cmd, `${command} is a command`)
    for (const [, line] of rows) {
      const words = line.split(/\s+/)
      t.equal(words[0], command, `${line}: runs ${command}`)
      for (const word of words.slice(1)) {
        if (word === '|' || word === '>') break
        const flag = /^(--?[a-z][a-z-]*)/i.exec(word)?.[1]
        if (!flag || flag === '--help') continue
        const known = cmd!.options.some((o) => o.long === flag || o.short === flag || o.long === flag.split('=')[0])
        t.ok(known, `${command}: ${flag} (in "${line}") is one of its flags`)
      }
    }
  }
})

t.test('the built CLI: a usage error is the message and a pointer to help, exit 2', async (t) => {
  const bad = await cli('migrate', '--bogus')
  t.equal(bad.code, 2)
  t.equal(bad.stderr, "error: unknown option '--bogus'\nSee 'crd-migrator migrate --help'.\n", 'two lines, not the help')
  t.equal(bad.stdout, '')
  const top = await cli('nope')
  t.equal(top.code, 2)
  t.match(top.stderr, /^error: unknown command 'nope'\nSee 'crd-migrator --help'\.\n$/)
})

t.test('the built CLI: help shows --[no-] forms, everyday flags first, and Examples', async (t) => {
  const serve = (await cli('serve', '--help')).stdout
  t.match(serve, /\n {2}--\[no-\]migrator +run the migration controller/, 'the off form shown')
  const migrate = (await cli('migrate', '--help')).stdout
  const options = migrate.slice(migrate.indexOf('Options:'))
  t.match(options, /^Options:\n {2}-l, --selector /, '-l first')
  t.ok(options.indexOf('--dry-run') < options.indexOf('--request-timeout'), 'the everyday flags before the plumbing')
  t.match(migrate, /\nExamples:\n {2}# Migrate one CRD now[^\n]*\n {2}crd-migrator migrate widgets\.example\.com\n/)
})
