/**
 * `crd-migrator completion bash|zsh|fish`: a completion script generated from the
 * program's own commands and options (commander has none built in), so it cannot drift
 * from the CLI. It completes command names, each command's long and short options, the
 * values of options and arguments with a fixed set of choices, and file names otherwise.
 */
import type { Command, Option } from 'commander'

export const SHELLS = ['bash', 'zsh', 'fish'] as const
export type Shell = (typeof SHELLS)[number]

/** What a script needs to know of one command. */
interface CommandSpec {
  name: string
  description: string
  options: OptionSpec[]
  /** Choices of the first argument, e.g. the shells of `completion`. */
  argumentChoices: readonly string[]
}

interface OptionSpec {
  long?: string
  short?: string
  description: string
  /** The option takes a value. */
  takesValue: boolean
  choices: readonly string[]
}

function optionSpec(o: Option): OptionSpec {
  return {
    long: o.long,
    short: o.short,
    description: firstClause(o.description),
    takesValue: o.required || o.optional,
    choices: o.argChoices ?? [],
  }
}

/** Help text up to its first `;` or `(`, without the `[env ...]` note: a line in a menu. */
function firstClause(text: string): string {
  return text
    .replace(/\s*\[env [^\]]*\]$/, '')
    .split(/[;(]/)[0]!
    .trim()
}

export function commandSpecs(program: Command): CommandSpec[] {
  return program.commands.map((cmd) => ({
    name: cmd.name(),
    description: firstClause(cmd.description()),
    options: [
      ...cmd.options.filter((o) => !o.hidden).map(optionSpec),
      { long: '--help', description: 'display help', takesValue: false, choices: [] },
    ],
    argumentChoices: cmd.registeredArguments[0]?.argChoices ?? [],
  }))
}

export function completionScript(shell: Shell, program: Command): string {
  const name = program.name()
  const specs = commandSpecs(program)
  switch (shell) {
    case 'bash':
      return bashScript(name, specs)
    case 'zsh':
      return zshScript(name, specs)
    case 'fish':
      return fishScript(name, specs)
  }
}

const flags = (o: OptionSpec) => [o.long, o.short].filter((f): f is string => f !== undefined)
/** A shell function name from the program's: crd-migrator -> _crd_migrator. */
const functionName = (name: string) => `_${name.replace(/[^A-Za-z0-9_]/g, '_')}`
/** Single-quoted for zsh (as for any POSIX shell: a quote ends, is escaped, and starts again). */
const shQuote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`
/** Single-quoted for fish, which reads \\ and \' inside single quotes. */
const fishQuote = (s: string) => `'${s.replace(/[\\']/g, '\\$&')}'`

function bashScript(name: string, specs: CommandSpec[]): string {
  const fn = functionName(name)
  const words = (s: CommandSpec) => [...s.argumentChoices, ...s.options.flatMap(flags)].join(' ')
  // After an option that takes a value: its choices, or nothing (then bash offers file names).
  const valueCases = (s: CommandSpec) => {
    const values = s.options.filter((o) => o.takesValue)
    const free = values.filter((o) => o.choices.length === 0).flatMap(flags)
    return [
      ...values
        .filter((o) => o.choices.length > 0)
        .map((o) => `        ${flags(o).join('|')}) COMPREPLY=($(compgen -W "${o.choices.join(' ')}" -- "$cur")); return ;;`),
      ...(free.length > 0 ? [`        ${free.join('|')}) return ;;`] : []),
    ]
  }
  return [
    `# ${name} completion for bash: source <(${name} completion bash)`,
    `${fn}() {`,
    '  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd= i',
    '  COMPREPLY=()',
    '  for ((i = 1; i < COMP_CWORD; i++)); do',
    '    case ${COMP_WORDS[i]} in -*) ;; *) cmd=${COMP_WORDS[i]}; break ;; esac',
    '  done',
    '  case $cmd in',
    `    '') COMPREPLY=($(compgen -W "${[...specs.map((s) => s.name), '--help', '--version'].join(' ')}" -- "$cur")); return ;;`,
    ...specs.flatMap((s) => [
      `    ${s.name})`,
      '      case $prev in',
      ...valueCases(s),
      '      esac',
      `      COMPREPLY=($(compgen -W "${words(s)}" -- "$cur")) ;;`,
    ]),
    '  esac',
    '}',
    // -o default: file names when nothing else fits (a value of --kubeconfig, a CRD name is typed).
    `complete -o default -F ${fn} ${name}`,
    '',
  ].join('\n')
}

function zshScript(name: string, specs: CommandSpec[]): string {
  const fn = functionName(name)
  const escape = (s: string) => s.replace(/[[\]:\\]/g, '\\$&')
  const optionArg = (o: OptionSpec, flag: string) => {
    const spec = `${flag}[${escape(o.description)}]`
    if (!o.takesValue) return shQuote(spec)
    return shQuote(`${spec}:value:${o.choices.length > 0 ? `(${o.choices.join(' ')})` : '_files'}`)
  }
  return [
    `#compdef ${name}`,
    `# ${name} completion for zsh: source <(${name} completion zsh), or save it as _${name} in your $fpath`,
    `${fn}() {`,
    '  local -a commands',
    `  commands=(${specs.map((s) => shQuote(`${s.name}:${s.description.replace(/:/g, '\\:')}`)).join(' ')})`,
    '  if (( CURRENT == 2 )); then',
    "    _describe 'command' commands",
    '    return',
    '  fi',
    '  case ${words[2]} in',
    ...specs.map((s) => {
      const args = s.options.flatMap((o) => flags(o).map((f) => optionArg(o, f)))
      if (s.argumentChoices.length > 0) args.push(shQuote(`1:${s.name}:(${s.argumentChoices.join(' ')})`))
      else args.push(shQuote('*:file:_files'))
      return `    ${s.name}) shift words; (( CURRENT-- )); _arguments -s ${args.join(' ')} ;;`
    }),
    '  esac',
    '}',
    `if [ "$funcstack[1]" = "${fn}" ]; then ${fn} "$@"; else compdef ${fn} ${name}; fi`,
    '',
  ].join('\n')
}

function fishScript(name: string, specs: CommandSpec[]): string {
  const lines = [
    `# ${name} completion for fish: ${name} completion fish | source, or save it as ~/.config/fish/completions/${name}.fish`,
    `complete -c ${name} -f`,
    `complete -c ${name} -n __fish_use_subcommand -l help -d 'display help'`,
    `complete -c ${name} -n __fish_use_subcommand -l version -d 'print the version'`,
  ]
  for (const s of specs) {
    lines.push(`complete -c ${name} -n __fish_use_subcommand -a ${s.name} -d ${fishQuote(s.description)}`)
    const when = `-n ${fishQuote(`__fish_seen_subcommand_from ${s.name}`)}`
    if (s.argumentChoices.length > 0) lines.push(`complete -c ${name} ${when} -a ${fishQuote(s.argumentChoices.join(' '))}`)
    for (const o of s.options) {
      const names = [o.long ? `-l ${o.long.slice(2)}` : '', o.short ? `-s ${o.short.slice(1)}` : ''].filter(Boolean).join(' ')
      const value = !o.takesValue ? '' : o.choices.length > 0 ? ` -x -a ${fishQuote(o.choices.join(' '))}` : ' -r -F'
      lines.push(`complete -c ${name} ${when} ${names}${value} -d ${fishQuote(o.description)}`)
    }
  }
  return lines.join('\n') + '\n'
}
