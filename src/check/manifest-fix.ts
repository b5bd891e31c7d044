/**
 * `check --manifests PATH --fix`: custom resources written at a version about to go are
 * moved to the storage version in their files. Only their apiVersion changes: for a CRD
 * with conversion None the API server converts between versions the same way (the
 * fields are the same), so the document means what it meant. A Webhook conversion
 * cannot be done offline, and the API server does not offer it either (a dryRun=All
 * create answers in the version it was sent to and stores nothing to read back through
 * another; a body whose apiVersion differs from the URL's is refused): such documents
 * are refused with that reason, to be rewritten by hand.
 *
 * The edit is made in the text, at the apiVersion scalar's own range as the `yaml`
 * package's parser reports it, with the quoting it had: comments, other documents, key
 * order and indentation stay byte for byte. Each result is parsed again and compared,
 * document by document, with the original parse after setIn(['apiVersion'], …); any other
 * difference refuses the whole file.
 */
import { chmod, readFile, rename, stat, writeFile } from 'node:fs/promises'
import { isScalar, parseAllDocuments } from 'yaml'
import { CrdMigratorError, ConfigError, errorMessage } from '../errors.js'
import type { BlockingResource, VersionGate } from './manifest-resources.js'
import { describeResource, splitApiVersion } from './manifest-resources.js'

export interface FixEdit {
  documentIndex: number
  /** The new apiVersion. */
  apiVersion: string
}

/** One line changed, as a diff shows it (1-based line). */
export interface LineChange {
  documentIndex: number
  line: number
  before: string
  after: string
}

/** What --fix did (or, with --dry-run, would do) to one resource. */
export interface FixOutcome {
  file: string
  documentIndex: number
  kind: string
  namespace?: string
  name?: string
  from: string
  to?: string
  status: 'fixed' | 'would-fix' | 'refused'
  reason?: string
  line?: number
}

/** Where each blocking resource goes, or why it cannot be moved. */
export function planFixes(
  blocking: readonly BlockingResource[],
  gates: readonly VersionGate[],
): Array<{ resource: BlockingResource; to: string } | { resource: BlockingResource; refused: string }> {
  return blocking.map((resource) => {
    const gate = gates.find((g) => g.crd === resource.crd)
    const { group } = splitApiVersion(resource.apiVersion)
    if (!gate?.storageVersion) return { resource, refused: `CustomResourceDefinition ${resource.crd} has no storage version to move it to` }
    if (gate.storageVersion === resource.version)
      return { resource, refused: `${resource.version} is the storage version of ${resource.crd}: there is no other version to move it to` }
    if (gate.conversion === 'Webhook')
      return {
        resource,
        refused: `${resource.crd} converts between versions with a webhook, which cannot be run offline (nor through a dryRun=All write: it answers in the version sent and stores nothing to read back); rewrite this document at ${group}/${gate.storageVersion} by hand`,
      }
    return { resource, to: `${group}/${gate.storageVersion}` }
  })
}

const PLAIN_SAFE = /^[A-Za-z0-9][A-Za-z0-9._/-]*$/

/** `text` with each edited document's apiVersion replaced in place; throws a ConfigError when it cannot be done faithfully. */
export function rewriteApiVersions(text: string, edits: readonly FixEdit[], file: string): { text: string; changes: LineChange[] } {
  const docs = parseAllDocuments(text)
  const splices: Array<{ start: number; end: number; value: string; documentIndex: number }> = []
  for (const edit of edits) {
    const doc = docs[edit.documentIndex]
    const node = doc?.get('apiVersion', true)
    if (!doc || !isScalar(node) || !node.range)
      throw new ConfigError(`--fix: ${file} [${edit.documentIndex}]: no apiVersion scalar to rewrite`)
    const value =
      node.type === 'PLAIN' && PLAIN_SAFE.test(edit.apiVersion)
        ? edit.apiVersion
        : node.type === 'QUOTE_DOUBLE'
          ? JSON.stringify(edit.apiVersion)
          : node.type === 'QUOTE_SINGLE'
            ? `'${edit.apiVersion.replace(/'/g, "''")}'`
            : undefined
    if (value === undefined)
      throw new ConfigError(`--fix: ${file} [${edit.documentIndex}]: apiVersion is a ${node.type} scalar; rewrite it by hand`)
    splices.push({ start: node.range[0], end: node.range[1], value, documentIndex: edit.documentIndex })
    doc.setIn(['apiVersion'], edit.apiVersion)
  }
  let out = text
  for (const s of [...splices].sort((a, b) => b.start - a.start)) out = out.slice(0, s.start) + s.value + out.slice(s.end)
  verify(
    out,
    docs.map((d) => d.toJS() as unknown),
    file,
  )
  const oldLines = text.split('\n')
  const newLines = out.split('\n')
  const changes = splices
    .sort((a, b) => a.start - b.start)
    .map((s) => {
      const line = text.slice(0, s.start).split('\n').length
      return { documentIndex: s.documentIndex, line, before: oldLines[line - 1]!, after: newLines[line - 1]! }
    })
  return { text: out, changes }
}

/** The rewritten text parses to exactly the expected documents, or nothing is written. */
function verify(text: string, expected: unknown[], file: string): void {
  const docs = parseAllDocuments(text)
  const got = docs.map((d) => (d.errors.length ? { errors: d.errors.map((e) => e.message) } : (d.toJS() as unknown)))
  if (JSON.stringify(got) !== JSON.stringify(expected))
    throw new CrdMigratorError('CRDM_INTERNAL', `--fix: rewriting ${file} would change more than apiVersion; nothing written`)
}

/**
 * Rewrites (or, with dryRun, only plans) the files of the planned fixes, one read and one
 * write per file. A file that cannot be rewritten faithfully is left as it was, its
 * resources refused with the reason.
 */
export async function applyFixes(plans: ReturnType<typeof planFixes>, dryRun: boolean): Promise<FixOutcome[]> {
  const outcomes: FixOutcome[] = []
  const base = (r: BlockingResource) => ({
    file: r.file,
    documentIndex: r.documentIndex,
    kind: r.kind,
    ...(r.namespace !== undefined ? { namespace: r.namespace } : {}),
    ...(r.name !== undefined ? { name: r.name } : {}),
    from: r.apiVersion,
  })
  const byFile = new Map<string, Array<{ resource: BlockingResource; to: string }>>()
  for (const p of plans) {
    if ('refused' in p) outcomes.push({ ...base(p.resource), status: 'refused', reason: p.refused })
    else byFile.set(p.resource.file, [...(byFile.get(p.resource.file) ?? []), p])
  }
  for (const [file, fixes] of byFile) {
    try {
      const text = await readFile(file, 'utf8')
      const edits = fixes.map((f) => ({ documentIndex: f.resource.documentIndex, apiVersion: f.to }))
      const rewritten = rewriteApiVersions(text, edits, file)
      if (!dryRun) await replaceFile(file, rewritten.text)
      for (const f of fixes) {
        const line = rewritten.changes.find((c) => c.documentIndex === f.resource.documentIndex)?.line
        outcomes.push({ ...base(f.resource), to: f.to, status: dryRun ? 'would-fix' : 'fixed', ...(line ? { line } : {}) })
      }
    } catch (err) {
      if (err instanceof CrdMigratorError && err.code !== 'CRDM_CONFIG_INVALID' && err.code !== 'CRDM_INTERNAL') throw err
      for (const f of fixes) outcomes.push({ ...base(f.resource), to: f.to, status: 'refused', reason: errorMessage(err) })
    }
  }
  return outcomes.sort((a, b) => a.file.localeCompare(b.file) || a.documentIndex - b.documentIndex)
}

/** The new text under a temporary name in the same directory, then renamed over the file (its mode kept): never half a file. */
async function replaceFile(file: string, text: string): Promise<void> {
  const { mode } = await stat(file)
  const temp = `${file}.crd-migrator-fix-${process.pid}`
  await writeFile(temp, text, { mode })
  await chmod(temp, mode)
  await rename(temp, file)
}

/** A diff-like summary: per file, each apiVersion line before and after; refusals with their reason. */
export function formatFixes(outcomes: readonly FixOutcome[], dryRun: boolean): string {
  if (outcomes.length === 0) return ''
  const lines: string[] = []
  for (const file of [...new Set(outcomes.map((o) => o.file))]) {
    const ofFile = outcomes.filter((o) => o.file === file)
    const moved = ofFile.filter((o) => o.status !== 'refused')
    if (moved.length > 0) lines.push(`--- ${file}`, `+++ ${file}${dryRun ? ' (dry run: not written)' : ''}`)
    for (const o of moved) {
      lines.push(`@@ line ${o.line ?? '?'}, ${describeResource({ ...o, apiVersion: o.from })} @@`)
      lines.push(`-apiVersion: ${o.from}`, `+apiVersion: ${o.to}`)
    }
    for (const o of ofFile.filter((x) => x.status === 'refused'))
      lines.push(`not fixed: ${describeResource({ ...o, apiVersion: o.from })} (${o.from}): ${o.reason}`)
  }
  const done = outcomes.filter((o) => o.status !== 'refused').length
  const refused = outcomes.length - done
  lines.push(
    `${dryRun ? 'would fix' : 'fixed'} ${done} of ${outcomes.length} document(s)${refused ? `; ${refused} not fixed (see above)` : ''}${dryRun ? '; nothing written' : ''}`,
  )
  return `${lines.join('\n')}\n\n`
}
