/**
 * `__complete WORD...`: cobra's output (`value<TAB>description` lines, then `:<directive>`),
 * read by our completion scripts and by kubectl. A failing or slow look-up offers nothing and
 * says nothing: Tab must never print an error or hang.
 */
import type { Command } from 'commander'
import { plainText, sanitizeText } from '../../sanitize.js'
import { completeWords, Directive, type Candidate } from './candidates.js'
import { lookupCandidates, type LookupOptions } from './sources.js'

export async function completionOutput(program: Command, words: readonly string[], options: LookupOptions = {}): Promise<string> {
  const completion = completeWords(program, words)
  let candidates = completion.candidates
  if (completion.lookup) {
    try {
      const found = await lookupCandidates(completion.lookup, completion.options, options)
      candidates = [...candidates, ...found.filter((c) => c.value.startsWith(completion.toComplete))]
    } catch {
      // No candidates, and the shell's own file completion (cobra's default directive).
      return formatCompletion([], Directive.Default)
    }
  }
  return formatCompletion(candidates, completion.directive)
}

/** The protocol's lines. A value with a tab, a line break or an escape sequence cannot be offered as it is: left out. */
export function formatCompletion(candidates: readonly Candidate[], directive: number): string {
  const lines = candidates
    .filter((c) => c.value !== '' && plainText(c.value) === c.value && !/\s/.test(c.value))
    .map((c) => {
      const description = c.description ? sanitizeText(c.description, 200) : ''
      return description ? `${c.value}\t${description}` : c.value
    })
  return [...lines, `:${directive}`, ''].join('\n')
}
