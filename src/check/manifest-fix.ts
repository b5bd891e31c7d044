/**
 * `check --manifests --fix`: custom resources at a version about to go are moved to the storage
 * version in their files, apiVersion only, the rest byte for byte; why only for conversion None:
 * docs/dropping-a-version.md#fixing-them---fix-and---fix---dry-run.
 */
import { chmod, readFile, rename, stat, writeFile } from 'node:fs/promises'
import { isAbsolute, relative, resolve, sep } from 'node:path'
import { isScalar, parseAllDocuments } from 'yaml'
import { CrdMigratorError, ConfigError, errorMessage } from '../errors.js'
import type { ManifestResource } from './manifests.js'
import type { BlockingResource, Place, VersionGate } from './manifest-resources.js'
import { describeResource, placeKey, splitApiVersion } from './manifest-resources.js'

/** Where a resource is, and its new apiVersion. */
type FixEdit = Place & Pick<ManifestResource, 'apiVersion'>

/** One line changed (1-based line). */
interface LineChange extends Place {
  line: number
  before: string
  after: string
}

/** What --fix did (or, with --dry-run, would do) to one resource. */
export interface FixOutcome extends Omit<ManifestResource, 'apiVersion'> {
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
  const splices: Array<Place & { start: number; end: number; value: string }> = []
  for (const edit of edits) {
    const doc = docs[edit.documentIndex]
    const path = [...(edit.itemPath ?? []).flatMap((i) => ['items', i]), 'apiVersion']
    const node = doc?.getIn(path, true)
    if (!doc || !isScalar(node) || !node.range) throw new ConfigError(`--fix: ${file} [${placeKey(edit)}]: no apiVersion scalar to rewrite`)
    const value =
      node.type === 'PLAIN' && PLAIN_SAFE.test(edit.apiVersion)
        ? edit.apiVersion
        : node.type === 'QUOTE_DOUBLE'
          ? JSON.stringify(edit.apiVersion)
          : node.type === 'QUOTE_SINGLE'
            ? `'${edit.apiVersion.replace(/'/g, "''")}'`
            : undefined
    if (value === undefined)
      throw new ConfigError(`--fix: ${file} [${placeKey(edit)}]: apiVersion is a ${node.type} scalar; rewrite it by hand`)
    splices.push({ start: node.range[0], end: node.range[1], value, documentIndex: edit.documentIndex, itemPath: edit.itemPath })
    doc.setIn(path, edit.apiVersion)
  }
  let out = text
  for (const s of [...splices].sort((a, b) => b.start - a.start)) out = out.slice(0, s.start) + s.value + out.slice(s.end)
  verify(out, docs, file)
  const oldLines = text.split('\n')
  const newLines = out.split('\n')
  const changes = splices
    .sort((a, b) => a.start - b.start)
    .map((s) => {
      const line = text.slice(0, s.start).split('\n').length
      return { documentIndex: s.documentIndex, itemPath: s.itemPath, line, before: oldLines[line - 1]!, after: newLines[line - 1]! }
    })
  return { text: out, changes }
}

/** The rewritten text parses to exactly the edited documents, or nothing is written. */
function verify(text: string, edited: ReturnType<typeof parseAllDocuments>, file: string): void {
  const got = parseAllDocuments(text).map((d) => (d.errors.length ? { errors: d.errors.map((e) => e.message) } : (d.toJS() as unknown)))
  if (JSON.stringify(got) !== JSON.stringify(edited.map((d) => d.toJS() as unknown)))
    throw new CrdMigratorError('CRDM_INTERNAL', `--fix: rewriting ${file} would change more than apiVersion; nothing written`)
}

/**
 * Rewrites (dryRun: only plans) the planned fixes' files, one read and write each; a file that
 * cannot be rewritten faithfully is left as it was, its resources refused. `patch`: a unified diff.
 */
export async function applyFixes(
  plans: ReturnType<typeof planFixes>,
  dryRun: boolean,
  cwd = process.cwd(),
): Promise<{ outcomes: FixOutcome[]; patch: string }> {
  const outcomes: FixOutcome[] = []
  const patches: string[] = []
  // An outcome names the resource as the manifest does, its apiVersion as `from`.
  const base = ({ apiVersion: from, crd: _crd, version: _version, cause: _cause, ...resource }: BlockingResource) => ({ ...resource, from })
  const byFile = new Map<string, Array<{ resource: BlockingResource; to: string }>>()
  for (const p of plans) {
    if ('refused' in p) outcomes.push({ ...base(p.resource), status: 'refused', reason: p.refused })
    else byFile.set(p.resource.file, [...(byFile.get(p.resource.file) ?? []), p])
  }
  for (const [file, fixes] of byFile) {
    try {
      const text = await readFile(file, 'utf8')
      const edits = fixes.map((f) => ({ documentIndex: f.resource.documentIndex, itemPath: f.resource.itemPath, apiVersion: f.to }))
      const rewritten = rewriteApiVersions(text, edits, file)
      if (!dryRun) await replaceFile(file, rewritten.text)
      patches.push(unifiedDiff(diffPath(file, cwd), text, rewritten.text))
      for (const f of fixes) {
        const line = rewritten.changes.find((c) => placeKey(c) === placeKey(f.resource))?.line
        outcomes.push({ ...base(f.resource), to: f.to, status: dryRun ? 'would-fix' : 'fixed', ...(line ? { line } : {}) })
      }
    } catch (err) {
      if (err instanceof CrdMigratorError && err.code !== 'CRDM_CONFIG_INVALID' && err.code !== 'CRDM_INTERNAL') throw err
      for (const f of fixes) outcomes.push({ ...base(f.resource), to: f.to, status: 'refused', reason: errorMessage(err) })
    }
  }
  outcomes.sort((a, b) => a.file.localeCompare(b.file) || a.documentIndex - b.documentIndex || placeKey(a).localeCompare(placeKey(b)))
  return { outcomes, patch: patches.join('') }
}

/** A file as a diff names it: relative to where the command runs (git apply's root), as given otherwise. */
function diffPath(file: string, cwd: string): string {
  const rel = relative(cwd, resolve(cwd, file))
  return rel.startsWith('..') || isAbsolute(rel) ? file : rel.split(sep).join('/')
}

/** Lines of context around each change, as diff -u and git diff give. */
const CONTEXT = 3

/** A git-style unified diff (`git apply`, `patch -p1`) of two texts of equal line count (--fix edits within lines); empty when none changed. */
export function unifiedDiff(path: string, before: string, after: string): string {
  const a = before.split('\n')
  const b = after.split('\n')
  if (a.length !== b.length) throw new CrdMigratorError('CRDM_INTERNAL', `--fix: ${path}: the rewrite changed the number of lines`)
  // A text ending in a newline splits into a last empty "line" that is not a line.
  const count = before.endsWith('\n') ? a.length - 1 : a.length
  const changed = []
  for (let i = 0; i < count; i++) if (a[i] !== b[i]) changed.push(i)
  if (changed.length === 0) return ''
  const hunks: Array<{ from: number; to: number }> = []
  for (const i of changed) {
    const from = Math.max(0, i - CONTEXT)
    const to = Math.min(count - 1, i + CONTEXT)
    const last = hunks.at(-1)
    if (last && from <= last.to + 1) last.to = to
    else hunks.push({ from, to })
  }
  const noNewline = before.endsWith('\n') ? undefined : count - 1
  const out = [`--- a/${path}`, `+++ b/${path}`]
  for (const h of hunks) {
    const n = h.to - h.from + 1
    out.push(`@@ -${h.from + 1},${n} +${h.from + 1},${n} @@`)
    const minus: string[] = []
    const plus: string[] = []
    const flush = () => {
      out.push(...minus, ...plus)
      minus.length = 0
      plus.length = 0
    }
    for (let i = h.from; i <= h.to; i++) {
      const eof = i === noNewline ? ['\\ No newline at end of file'] : []
      if (a[i] === b[i]) {
        flush()
        out.push(` ${a[i]}`, ...eof)
      } else {
        minus.push(`-${a[i]}`, ...eof)
        plus.push(`+${b[i]}`, ...eof)
      }
    }
    flush()
  }
  return `${out.join('\n')}\n`
}

/** The new text under a temporary name in the same directory, then renamed over the file (its mode kept): never half a file. */
async function replaceFile(file: string, text: string): Promise<void> {
  const { mode } = await stat(file)
  const temp = `${file}.crd-migrator-fix-${process.pid}`
  await writeFile(temp, text, { mode })
  await chmod(temp, mode)
  await rename(temp, file)
}

/** What the patch does not say: the documents not fixed, with why, and a count. Empty with no outcome. */
export function formatFixes(outcomes: readonly FixOutcome[], dryRun: boolean): string {
  if (outcomes.length === 0) return ''
  const lines = outcomes
    .filter((o) => o.status === 'refused')
    .map((o) => `not fixed: ${describeResource({ ...o, apiVersion: o.from })} (${o.from}): ${o.reason}`)
  const done = outcomes.length - lines.length
  lines.push(
    `${dryRun ? 'would fix' : 'fixed'} ${done} of ${outcomes.length} document(s)${lines.length ? `; ${lines.length} not fixed (see above)` : ''}${dryRun ? '; nothing written (the diff is on stdout: git apply takes it)' : ''}`,
  )
  return `${lines.join('\n')}\n`
}
