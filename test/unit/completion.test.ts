/**
 * Completion from the program itself: which candidates `__complete` offers for a line
 * (pure, from the commander program: table tests), the protocol's lines, the program's
 * name as a kubectl plugin, and the thin shell scripts of `completion bash|zsh|fish`, run
 * in the real shells against a stand-in program that answers what a test tells it to
 * (what the real program answers, against a real API server: test/integration/completion.test.ts).
 */
import { spawnSync } from 'node:child_process'
import { chmodSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { completeWords, Directive, summary, type Completion } from '../../src/cli/complete/candidates.js'
import { formatCompletion } from '../../src/cli/complete/completion-output.js'
import { completionScript, SHELLS } from '../../src/cli/complete/completion-script.js'
import { buildProgram } from '../../src/cli/program.js'
import { PLUGIN_NAME, PROGRAM_NAME, programName } from '../../src/cli/program-name.js'

const program = buildProgram()
const complete = (line: string): Completion => completeWords(program, line.split(' '))
const values = (c: Completion) => c.candidates.map((x) => x.value)
/** The choices of -o, as the program declares them (read generically: whoever adds a choice adds a candidate). */
const choicesOfO = (command: string) => [
  ...(program.commands.find((c) => c.name() === command)!.options.find((o) => o.short === '-o')!.argChoices ?? []),
]
const outputChoices = choicesOfO('migrate')
const has =
  (...want: string[]) =>
  (v: string[]) =>
    want.every((w) => v.includes(w))

t.test('candidates for a line (the last word is the one being typed)', async (t) => {
  const NO_FILES = Directive.NoFileComp
  const cases: Array<{
    line: string
    want: string[] | ((v: string[]) => boolean)
    directive: number
    lookup?: Completion['lookup']
    note: string
  }> = [
    {
      line: '',
      want: (v) => v.includes('migrate') && v.includes('completion') && v.includes('help'),
      directive: NO_FILES,
      note: 'commands',
    },
    { line: 'mig', want: ['migrate'], directive: NO_FILES, note: 'a command by its prefix' },
    { line: 'c', want: ['check', 'completion'], directive: NO_FILES, note: 'commands sharing a prefix' },
    { line: '__c', want: [], directive: NO_FILES, note: '__complete itself is hidden' },
    { line: 'help st', want: ['status'], directive: NO_FILES, note: 'help <command>' },
    { line: '--v', want: has('--version'), directive: NO_FILES, note: "the program's own flags" },
    { line: 'migrate --log-f', want: ['--log-format'], directive: NO_FILES, note: "a command's long flag" },
    { line: 'migrate --webhook-p', want: [], directive: NO_FILES, note: 'not a flag of another command (serve)' },
    { line: 'migrate --engine ', want: ['own', 'builtin'], directive: NO_FILES, note: "a setting's choices, from the schema" },
    { line: 'status -o ', want: has('wide', 'name', 'json', 'yaml'), directive: NO_FILES, note: "status's output formats" },
    {
      line: 'status -',
      want: (v) => v.includes('-w') && v.includes('--watch') && v.includes('-o') && v.includes('--help'),
      directive: NO_FILES,
      note: 'long and short flags, help included',
    },
    {
      line: 'status --summary --s',
      want: (v) => v.includes('--selector') && !v.includes('--summary'),
      directive: NO_FILES,
      note: 'a flag given already is not offered again',
    },
    { line: 'check --manifests a --manifests b --man', want: ['--manifests'], directive: NO_FILES, note: 'a list flag may be given again' },
    { line: 'migrate -o ', want: outputChoices, directive: NO_FILES, note: 'the choices of a flag' },
    { line: 'migrate --output j', want: ['json'], directive: NO_FILES, note: 'the choices, by prefix' },
    { line: 'migrate --output=', want: outputChoices, directive: NO_FILES, note: '--flag= form: the values alone' },
    { line: 'migrate --output=y', want: ['yaml'], directive: NO_FILES, note: '--flag=prefix form' },
    { line: 'status -wo ', want: choicesOfO('status'), directive: NO_FILES, note: 'a value flag after a boolean in one word' },
    { line: 'status --context ', want: [], directive: NO_FILES, lookup: { kind: 'contexts' }, note: 'contexts: looked up' },
    { line: 'status --context=', want: [], directive: NO_FILES, lookup: { kind: 'contexts' }, note: 'contexts, --context= form' },
    { line: 'migrate --kubeconfig ', want: [], directive: Directive.Default, note: 'a path: file names' },
    { line: 'check --manifests ', want: [], directive: Directive.Default, note: 'manifests: file names' },
    { line: 'webhook-config --ca=', want: [], directive: Directive.Default, note: '--ca= : file names' },
    { line: 'webhook-config --out ', want: [], directive: Directive.Default, note: '--out: file names' },
    { line: 'check --manifests a ', want: [], directive: Directive.Default, note: 'a list flag takes the next word too' },
    {
      line: 'check --manifests a --strict ',
      want: [],
      directive: NO_FILES | Directive.KeepOrder,
      lookup: { kind: 'crds', named: [] },
      note: 'until the next flag',
    },
    { line: 'check --manifests=a b ', want: [], directive: Directive.Default, note: 'a list flag, --flag= form' },
    { line: 'migrate --selector ', want: [], directive: NO_FILES, note: 'free text: nothing, not file names' },
    { line: 'migrate --bogus=', want: [], directive: NO_FILES, note: 'an unknown flag: nothing' },
    {
      line: 'migrate ',
      want: [],
      directive: NO_FILES | Directive.KeepOrder,
      lookup: { kind: 'crds', named: [] },
      note: 'CRD names: looked up, in order',
    },
    {
      line: 'status a.example.com --dry ',
      want: [],
      directive: NO_FILES | Directive.KeepOrder,
      lookup: { kind: 'crds', named: ['a.example.com'] },
      note: 'an unknown flag does not take a value',
    },
    {
      line: 'plan a.example.com --no-scan b.example.com ',
      want: [],
      directive: NO_FILES | Directive.KeepOrder,
      lookup: { kind: 'crds', named: ['a.example.com', 'b.example.com'] },
      note: 'names around a flag: left out of the look-up',
    },
    { line: 'migrate a.example.com --dr', want: ['--dry-run'], directive: NO_FILES, note: 'flags after arguments' },
    {
      line: 'migrate -- --dr',
      want: [],
      directive: NO_FILES | Directive.KeepOrder,
      lookup: { kind: 'crds', named: [] },
      note: 'after --: no flags, an argument',
    },
    {
      line: 'migrate -- -o ',
      want: [],
      directive: NO_FILES | Directive.KeepOrder,
      lookup: { kind: 'crds', named: ['-o'] },
      note: 'after --: -o is an argument, not a flag wanting a value',
    },
    { line: 'completion ', want: ['bash', 'zsh', 'fish'], directive: NO_FILES, note: 'the choices of an argument' },
    { line: 'completion z', want: ['zsh'], directive: NO_FILES, note: 'the choices of an argument, by prefix' },
    {
      line: 'serve ',
      want: (v) => v.includes('--webhook-port') && !v.includes('migrate'),
      directive: NO_FILES,
      note: 'no argument to take: the flags',
    },
  ]
  for (const c of cases) {
    const got = complete(c.line)
    if (typeof c.want === 'function') t.ok(c.want(values(got)), `${c.note}: "${c.line}"`, { got: values(got) })
    else t.same(values(got), c.want, `${c.note}: "${c.line}"`)
    t.equal(got.directive, c.directive, `${c.note}: directive`)
    t.same(got.lookup, c.lookup, `${c.note}: look-up`)
  }
})

t.test('the options given earlier on the line reach the look-up, as the command would see them', async (t) => {
  const got = complete('status --kubeconfig=/k/config --context prod --crds a,b -c ~/c.yaml --context=')
  t.same(got.options, { kubeconfig: '/k/config', context: 'prod', crds: 'a,b', config: '~/c.yaml' })
  t.equal(got.toComplete, '')
  t.same(complete('check --manifests a --manifests b ').options, { manifests: ['a', 'b'] }, 'a list flag keeps every value')
})

t.test('descriptions: one line of a menu', async (t) => {
  t.equal(summary('kubeconfig file; when unset, $KUBECONFIG [env CRD_MIGRATOR_KUBECONFIG]'), 'kubeconfig file')
  t.equal(summary('print a completion script for bash, zsh or fish, e.g. source <(x)'), 'print a completion script for bash, zsh or fish')
  t.equal(summary('migrate the named CRDs (or resources) now'), 'migrate the named CRDs')
  for (const c of complete('migrate --').candidates) {
    t.notMatch(c.description, /\[env |;/, `${c.value}: without the env note or a second clause`)
    t.ok(c.description, `${c.value}: described`)
  }
})

t.test('the protocol: value<TAB>description lines, then :directive', async (t) => {
  t.equal(formatCompletion([], 4), ':4\n')
  t.equal(formatCompletion([{ value: 'a' }, { value: 'b', description: 'managed' }], 36), 'a\nb\tmanaged\n:36\n')
  t.equal(
    formatCompletion(
      [{ value: 'x\ty' }, { value: 'p q' }, { value: '\u001b[2Jz' }, { value: 'ok', description: 'line\nbreak\u001b[31m' }],
      0,
    ),
    'ok\tline break\n:0\n',
    'values that cannot be offered as they are are left out; descriptions are made plain',
  )
})

t.test("the program's name: kubectl crd-migrator as a kubectl plugin", async (t) => {
  t.equal(programName('/usr/local/bin/crd-migrator', {}), PROGRAM_NAME)
  t.equal(programName('/usr/lib/node_modules/crd-migrator/dist/cli/main.js', {}), PROGRAM_NAME)
  t.equal(programName('/usr/local/bin/kubectl-crd_migrator', {}), PLUGIN_NAME)
  t.equal(programName('/usr/local/bin/crd-migrator', { KUBECTL_PLUGINS_CALLER: '/usr/bin/kubectl' }), PLUGIN_NAME)
  t.equal(programName(undefined, {}), PROGRAM_NAME)
  t.match(buildProgram(PLUGIN_NAME).helpInformation(), /^Usage: kubectl crd-migrator \[options\] \[command\]/)
  const migrate = buildProgram(PLUGIN_NAME).commands.find((c) => c.name() === 'migrate')!
  t.match(migrate.helpInformation(), /^Usage: kubectl crd-migrator migrate /)
  t.notMatch(buildProgram().helpInformation(), /__complete/, 'the hidden command is not in the help')
})

// --- the scripts, in the real shells, against a stand-in program ---------------------------

/** A shell test runs where the shell is installed (bash always is; zsh and fish may not be). */
const unless = (shell: string) => (spawnSync(shell, ['-c', 'exit 0']).error ? `${shell} is not installed` : false)

/** A `crd-migrator` that records its arguments (one a line) and prints `answer`. */
function standIn(dir: string, answer: string): { bin: string; args: () => string[] } {
  const bin = join(dir, 'crd-migrator')
  const answerFile = join(dir, 'answer')
  const argsFile = join(dir, 'args')
  writeFileSync(answerFile, answer)
  writeFileSync(bin, `#!/bin/sh\nprintf '%s\\n' "$@" > '${argsFile}'\ncat '${answerFile}'\necho noise >&2\n`)
  chmodSync(bin, 0o755)
  return { bin, args: () => readFileSync(argsFile, 'utf8').split('\n').slice(0, -1) }
}

for (const shell of SHELLS) {
  t.test(`completion ${shell}: a script that names no command, only the program and __complete`, async (t) => {
    const script = completionScript(shell)
    t.match(script, /__complete/)
    for (const command of ['migrate', 'status', '--log-format'])
      t.notMatch(script, command, `${command} comes from the program, not the script`)
  })
}

t.test('bash: the script passes the words as typed and offers what the program answers', async (t) => {
  const dir = t.testdir()
  const file = join(dir, 'crd-migrator.bash')
  writeFileSync(file, completionScript('bash'))
  t.equal(spawnSync('bash', ['-n', file]).status, 0, 'bash -n: it parses')
  /** Runs the completion function for COMP_WORDS (and COMP_LINE up to the cursor, when given, as bash sets them). */
  const run = (answer: string, words: string[], line?: string) => {
    const program = standIn(dir, answer)
    const array = words.map((w) => `'${w}'`).join(' ')
    const lineVars = line === undefined ? '' : `COMP_LINE='${line}'; COMP_POINT=${line.length};`
    const r = spawnSync(
      'bash',
      [
        '-c',
        `source '${file}'; COMP_WORDS=(${array}); COMP_CWORD=${words.length - 1}; ${lineVars} _crd_migrator; printf '%s\\n' "\${COMPREPLY[@]}"`,
      ],
      { encoding: 'utf8', env: { ...process.env, PATH: `${dir}:${process.env['PATH']}` } },
    )
    t.equal(r.stderr, '', `${words.join(' ')}: nothing on stderr`)
    return { reply: r.stdout.split('\n').filter((l) => l !== ''), args: program.args() }
  }
  let r = run('migrate\tmigrate the named CRDs\n:4\n', ['crd-migrator', 'mig'])
  t.same(r.args, ['__complete', 'mig'])
  t.same(r.reply, ['migrate'], 'the value, not its description')
  r = run('a\nb\n:4\n', ['crd-migrator', 'status', ''])
  t.same(r.args, ['__complete', 'status', ''], 'an empty word after a space')
  t.same(r.reply, ['a', 'b'])
  // bash splits --context=x at '=' and a:b at ':'; COMP_LINE says there was no space.
  r = run('kind-one\narn:aws:eks:1:cluster/prod\n:4\n', ['crd-migrator', 'status', '--context', '='], 'crd-migrator status --context=')
  t.same(r.args, ['__complete', 'status', '--context='], '--context= is one word to the program')
  t.same(r.reply, ['kind-one', 'arn:aws:eks:1:cluster/prod'], 'bash replaces what follows the =: the values alone')
  r = run(
    'arn:aws:eks:1:cluster/prod\n:4\n',
    ['crd-migrator', 'status', '--context', '=', 'arn', ':', 'aws', ':', 'e'],
    'crd-migrator status --context=arn:aws:e',
  )
  t.same(r.args, ['__complete', 'status', '--context=arn:aws:e'])
  t.same(r.reply, ['eks:1:cluster/prod'], 'bash replaces what follows the last :, so that is what is offered')
  r = run('arn:aws:eks:1:cluster/prod\n:4\n', ['crd-migrator', 'status', '--context', 'arn', ':'], 'crd-migrator status --context arn:')
  t.same(r.args, ['__complete', 'status', '--context', 'arn:'])
  t.same(r.reply, ['aws:eks:1:cluster/prod'])
  r = run('yaml\n:4\n', ['crd-migrator', 'status', '--output=y'])
  t.same(r.reply, ['--output=yaml'], 'without COMP_LINE the word is replaced whole: the flag stays in front')
  r = run(':0\n', ['crd-migrator', 'migrate', '--kubeconfig', ''])
  t.same(r.reply, [], 'nothing: bash offers file names (-o default)')
  r = run('not the protocol\n', ['crd-migrator', ''])
  t.same(r.reply, [], 'an answer without a directive: nothing')
})

t.test('zsh: the script parses and, sourced after compinit, registers its function', { skip: unless('zsh') }, async (t) => {
  const file = join(t.testdir(), '_crd-migrator')
  writeFileSync(file, completionScript('zsh'))
  const r = spawnSync('zsh', ['-f', '-c', `autoload -U compinit; compinit -u -D; source '${file}'; print -r -- $_comps[crd-migrator]`], {
    encoding: 'utf8',
  })
  t.equal(r.status, 0, 'zsh exit 0', { stderr: r.stderr })
  t.equal(r.stdout.trim(), '_crd_migrator', 'compdef _crd_migrator crd-migrator')
})

t.test('fish: the sourced script offers what the program answers', { skip: unless('fish') }, async (t) => {
  const dir = t.testdir()
  const file = join(dir, 'crd-migrator.fish')
  writeFileSync(file, completionScript('fish'))
  const run = (answer: string, line: string) => {
    const program = standIn(dir, answer)
    const r = spawnSync('fish', ['--no-config', '-c', `source '${file}'; complete -C '${line}'`], {
      encoding: 'utf8',
      env: { ...process.env, PATH: `${dir}:${process.env['PATH']}` },
    })
    t.equal(r.status, 0, `${line}: fish exit 0`, { stderr: r.stderr })
    return {
      reply: r.stdout
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => l.split('\t')[0]),
      args: program.args(),
    }
  }
  let r = run('migrate\tmigrate the named CRDs\n:4\n', 'crd-migrator mig')
  t.same(r.args, ['__complete', 'mig'])
  t.same(r.reply, ['migrate'])
  r = run('kind-one\nprod\n:4\n', 'crd-migrator status --context=')
  t.same(r.args, ['__complete', 'status', '--context='])
  t.same(r.reply, ['--context=kind-one', '--context=prod'], 'fish replaces the whole token: the flag stays in front')
  r = run('b.example.com\tmanaged\na.example.com\n:36\n', 'crd-migrator migrate ')
  t.same(r.reply, ['b.example.com', 'a.example.com'], "the program's order (managed first)")
})
