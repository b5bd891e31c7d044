/**
 * What to offer for the last word of a command line, read from the commander program itself
 * (cobra's `__complete` protocol, as kubectl, helm and flux speak). Pure: values only the
 * cluster or the kubeconfig knows come back as a Lookup for the caller (sources.ts).
 */
import { Help, type Command, type Option } from 'commander'

/** cobra's ShellCompDirective bits: what the shell does besides offering the candidates. */
export const Directive = {
  Default: 0,
  Error: 1,
  NoSpace: 2,
  NoFileComp: 4,
  FilterFileExt: 8,
  FilterDirs: 16,
  KeepOrder: 32,
} as const

export interface Candidate {
  value: string
  description?: string
}

/** A value the program cannot know by itself: the kubeconfig's contexts, the cluster's CRDs. */
export type Lookup = { kind: 'contexts' } | { kind: 'crds'; named: string[] }

export interface Completion {
  /** The text being completed: the last word, or the value after `--flag=`. */
  toComplete: string
  candidates: Candidate[]
  directive: number
  lookup?: Lookup
  /** Options given earlier on the line, by commander attribute name (as a command's action sees them). */
  options: Record<string, string | string[] | boolean>
}

/** Options whose value is a path: the shell completes file names. */
const PATH_OPTIONS = new Set(['--kubeconfig', '--config', '--manifests', '--ca', '--out', '--tls-cert', '--tls-key'])
const PATH_PLACEHOLDER = /<(file|path|dir)\b/
/** A positional argument of this name is a CRD name (migrate, status, check, plan). */
const CRD_ARGUMENT = 'crd'

/** Candidates before the prefix filter, the directive, and what is left to look up. */
type Answer = [candidates: Candidate[], directive: number, lookup?: Lookup]

const takesValue = (o: Option) => o.required || o.optional

/** The option of `cmd` a flag names (`--name`, `-n`), hidden ones included: they parse as any other. */
function findOption(cmd: Command, flag: string): Option | undefined {
  const help = new Help().visibleOptions(cmd).find((o) => o.long === '--help')
  return [...cmd.options, ...(help ? [help] : [])].find((o) => o.long === flag || o.short === flag)
}

function findCommand(cmd: Command, name: string): Command | undefined {
  return cmd.commands.find((c) => c.name() === name || c.aliases().includes(name))
}

/** Completes `words`, the words after the program's name; the last is the one being typed ('' after a space). */
export function completeWords(program: Command, words: readonly string[]): Completion {
  const toComplete = words.at(-1) ?? ''
  const given = words.slice(0, -1)
  let cmd = program
  const options: Record<string, string | string[] | boolean> = {}
  const used = new Set<Option>()
  const positionals: string[] = []
  let pending: Option | undefined
  let optionalPending: Option | undefined
  /** A list option (`--manifests <path...>`) takes the words after its value too, up to the next option (commander). */
  let variadic: Option | undefined
  let operandsOnly = false
  const record = (o: Option, value: string | undefined) => {
    used.add(o)
    const key = o.attributeName()
    if (value === undefined) options[key] = !o.negate
    else if (o.variadic) options[key] = [...((options[key] as string[] | undefined) ?? []), value]
    else options[key] = value
  }
  for (const word of given) {
    if (pending) {
      record(pending, word)
      if (pending.variadic) variadic = pending
      pending = undefined
      continue
    }
    if (variadic && !operandsOnly && !word.startsWith('-')) {
      record(variadic, word)
      continue
    }
    variadic = undefined
    if (optionalPending) {
      const o = optionalPending
      optionalPending = undefined
      // commander gives an optional value the next word unless it looks like an option.
      if (!word.startsWith('-')) {
        record(o, word)
        continue
      }
    }
    if (operandsOnly || word === '-' || !word.startsWith('-')) {
      const sub = positionals.length === 0 && !operandsOnly ? findCommand(cmd, word) : undefined
      if (sub) cmd = sub
      else positionals.push(word)
      continue
    }
    if (word === '--') {
      operandsOnly = true
      continue
    }
    if (word.startsWith('--')) {
      const eq = word.indexOf('=')
      const o = findOption(cmd, eq < 0 ? word : word.slice(0, eq))
      if (!o) continue
      if (eq >= 0) {
        record(o, word.slice(eq + 1))
        if (o.variadic) variadic = o
      } else if (o.required) pending = o
      else if (o.optional) {
        record(o, undefined)
        optionalPending = o
      } else record(o, undefined)
      continue
    }
    // Short flags, possibly several booleans in one word (-wx) or a value attached (-ojson).
    for (let i = 1; i < word.length; i++) {
      const o = findOption(cmd, `-${word[i]}`)
      if (!o) break
      if (!takesValue(o)) {
        record(o, undefined)
        continue
      }
      if (i + 1 < word.length) record(o, word.slice(i + 1))
      else if (o.required) pending = o
      else record(o, undefined)
      break
    }
  }
  const result = ([candidates, directive, lookup]: Answer, text = toComplete): Completion => ({
    toComplete: text,
    candidates: candidates.filter((c) => c.value.startsWith(text)),
    directive,
    ...(lookup ? { lookup } : {}),
    options,
  })
  if (pending) return result(valueCompletion(pending))
  if (!operandsOnly && toComplete.startsWith('--') && toComplete.includes('=')) {
    const eq = toComplete.indexOf('=')
    const o = findOption(cmd, toComplete.slice(0, eq))
    return result(o && takesValue(o) ? valueCompletion(o) : [[], Directive.NoFileComp], toComplete.slice(eq + 1))
  }
  if (optionalPending?.argChoices && !toComplete.startsWith('-')) return result(valueCompletion(optionalPending))
  if (variadic && !toComplete.startsWith('-')) return result(valueCompletion(variadic))
  if (!operandsOnly && toComplete.startsWith('-')) return result([flagCandidates(cmd, used), Directive.NoFileComp])
  return result(operandCompletion(cmd, positionals, used))
}

/** The value of option `o`: its choices, a context, a file name, or (free text) nothing. */
function valueCompletion(o: Option): Answer {
  if (o.argChoices) return [o.argChoices.map((value) => ({ value })), Directive.NoFileComp]
  if (o.long === '--context') return [[], Directive.NoFileComp, { kind: 'contexts' }]
  if ((o.long && PATH_OPTIONS.has(o.long)) || PATH_PLACEHOLDER.test(o.flags)) return [[], Directive.Default]
  return [[], Directive.NoFileComp]
}

/** A word that is not an option: a command, a choice of the argument, a CRD name, or a file name. */
function operandCompletion(cmd: Command, positionals: string[], used: Set<Option>): Answer {
  const help = new Help()
  // `help <command>` names a command too.
  if (cmd.commands.length > 0 && (positionals.length === 0 || (positionals.length === 1 && positionals[0] === 'help'))) {
    const commands = help.visibleCommands(cmd).map((c) => ({ value: c.name(), description: summary(c.description()) }))
    return [commands, Directive.NoFileComp]
  }
  const declared = cmd.registeredArguments
  const last = declared.at(-1)
  const argument = positionals.length < declared.length ? declared[positionals.length] : last?.variadic ? last : undefined
  if (argument?.argChoices) return [argument.argChoices.map((value) => ({ value })), Directive.NoFileComp]
  if (argument?.name() === CRD_ARGUMENT) return [[], Directive.NoFileComp | Directive.KeepOrder, { kind: 'crds', named: positionals }]
  // A command that takes no operand: its flags are all there is to type.
  if (declared.length === 0 || !argument) return [flagCandidates(cmd, used), Directive.NoFileComp]
  return [[], Directive.Default]
}

/** The command's visible flags, long and short, less those given already (a list option may be given again). */
function flagCandidates(cmd: Command, used: Set<Option>): Candidate[] {
  const out: Candidate[] = []
  for (const o of new Help().visibleOptions(cmd)) {
    if (used.has(o) && !o.variadic) continue
    const description = summary(o.description)
    for (const flag of [o.long, o.short]) if (flag) out.push({ value: flag, description })
  }
  return out
}

/** Help text up to its first `;`, ` (` or `, e.g.`, without an `[env ...]` note: one line of a menu. */
export function summary(text: string): string {
  return text
    .replace(/\s*\[env [^\]]*\]$/, '')
    .split(/;|\s\(|,\s*e\.g\./)[0]!
    .trim()
}
