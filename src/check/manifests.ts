/**
 * Manifests about to be applied (a chart's crds/, a release's YAML, a GitOps repository): their
 * CRDs with the versions each lists, and every other document or List item naming an apiVersion
 * and kind. Helm templates (`{{`) are not YAML until rendered: skipped, and said so.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { parseAllDocuments } from 'yaml'
import { ConfigError, errorMessage } from '../errors.js'
import { isObj } from '../migrator/lossless/content-diff.js'

export interface ManifestCrd {
  name: string
  group: string
  kind: string
  versions: string[]
  /** The version marked storage, when exactly one is. */
  storage: string | undefined
  /** spec.conversion.strategy (None when absent). */
  conversion: 'None' | 'Webhook'
  /** The file it came from, for messages. */
  file: string
}

/** A document that is not a CRD but has an apiVersion and a kind: maybe a custom resource. */
export interface ManifestResource {
  file: string
  /** Position of the document in its file, from 0 (yq's document_index). */
  documentIndex: number
  /** Inside a list document: its index in `items` (nested lists: one index per level). */
  itemPath?: number[]
  apiVersion: string
  kind: string
  namespace?: string
  name?: string
}

export interface SkippedFile {
  file: string
  reason: string
}

export interface Manifests {
  crds: ManifestCrd[]
  resources: ManifestResource[]
  skipped: SkippedFile[]
}

const MANIFEST = /\.(ya?ml|json)$/i
/** Go template actions: Helm's templates/ (not its crds/, which Helm applies as they are). */
const TEMPLATE = /\{\{/

/** The manifest files under `path`: the file itself, or a directory's YAML and JSON files, subdirectories included, in name order. */
function manifestFiles(path: string): string[] {
  if (!readOrRefuse(path, (p) => statSync(p)).isDirectory()) return [path]
  return readdirSync(path, { withFileTypes: true })
    .sort((a, b) => a.name.localeCompare(b.name))
    .flatMap((e) => (e.isDirectory() ? manifestFiles(join(path, e.name)) : MANIFEST.test(e.name) ? [join(path, e.name)] : []))
}

/** `read(path)`, its failure a usage error. */
function readOrRefuse<T>(path: string, read: (path: string) => T): T {
  try {
    return read(path)
  } catch (err) {
    throw new ConfigError(`--manifests: cannot read ${path}: ${errorMessage(err)}`, { cause: err })
  }
}

/** Why a file's text is not read as manifests (a template), or undefined. */
export function skipReason(text: string): string | undefined {
  return TEMPLATE.test(text) ? 'a template ({{ … }}): render it first (helm template) and check the output' : undefined
}

/** A list document (`kind: List`, or any `…List` with `items`, as kubectl get writes and apply takes): its items are resources of their own. */
function listItems(value: Record<string, unknown>): unknown[] | undefined {
  return typeof value.kind === 'string' && value.kind.endsWith('List') && Array.isArray(value.items) ? value.items : undefined
}

/** The CRDs and the other resources of one file's text (one or more YAML documents, lists opened). */
export function parseManifests(text: string, file: string): Omit<Manifests, 'skipped'> {
  const crds: ManifestCrd[] = []
  const resources: ManifestResource[] = []
  const collect = (value: unknown, documentIndex: number, itemPath: number[]) => {
    if (!isObj(value)) return
    const items = listItems(value)
    if (items) {
      items.forEach((item, i) => collect(item, documentIndex, [...itemPath, i]))
      return
    }
    const { apiVersion, kind } = value
    if (kind === 'CustomResourceDefinition' && typeof apiVersion === 'string' && apiVersion.startsWith('apiextensions.k8s.io/')) {
      crds.push(crdOf(value, file))
      return
    }
    if (typeof apiVersion !== 'string' || typeof kind !== 'string' || !apiVersion.includes('/')) return
    const metadata = isObj(value.metadata) ? value.metadata : {}
    resources.push({
      file,
      documentIndex,
      ...(itemPath.length ? { itemPath } : {}),
      apiVersion,
      kind,
      ...(typeof metadata.namespace === 'string' ? { namespace: metadata.namespace } : {}),
      ...(typeof metadata.name === 'string' ? { name: metadata.name } : {}),
    })
  }
  parseAllDocuments(text).forEach((doc, documentIndex) => {
    if (doc.errors.length > 0) throw new ConfigError(`--manifests: ${file} is not valid YAML: ${doc.errors[0]!.message}`)
    collect(doc.toJS(), documentIndex, [])
  })
  return { crds, resources }
}

function crdOf(value: Record<string, unknown>, file: string): ManifestCrd {
  if (value.apiVersion !== 'apiextensions.k8s.io/v1')
    throw new ConfigError(
      `--manifests: ${file}: a CustomResourceDefinition of ${JSON.stringify(value.apiVersion)}, expected apiextensions.k8s.io/v1`,
    )
  const metadata = isObj(value.metadata) ? value.metadata : {}
  const spec = isObj(value.spec) ? value.spec : {}
  const name = metadata.name
  const versions = spec.versions
  if (typeof name !== 'string' || name === '')
    throw new ConfigError(`--manifests: ${file}: a CustomResourceDefinition without metadata.name`)
  if (!Array.isArray(versions) || versions.some((v) => !isObj(v) || typeof v.name !== 'string'))
    throw new ConfigError(`--manifests: ${file}: CustomResourceDefinition ${name} has no spec.versions with names`)
  const names = isObj(spec.names) ? spec.names : {}
  const storage = (versions as Array<{ name: string; storage?: unknown }>).filter((v) => v.storage === true)
  const conversion = isObj(spec.conversion) && spec.conversion.strategy === 'Webhook' ? 'Webhook' : 'None'
  return {
    name,
    group: typeof spec.group === 'string' ? spec.group : name.slice(name.indexOf('.') + 1),
    kind: typeof names.kind === 'string' ? names.kind : '',
    versions: versions.map((v) => (v as { name: string }).name),
    storage: storage.length === 1 ? storage[0]!.name : undefined,
    conversion,
    file,
  }
}

/**
 * Every CRD and resource under the paths, templates skipped. A CRD named twice is a usage error;
 * so is no CRD, unless `resourcesEnough` (`--drop` names the version, so resources alone do).
 */
export function readManifests(paths: readonly string[], resourcesEnough = false): Manifests {
  const out: Manifests = { crds: [], resources: [], skipped: [] }
  for (const file of paths.flatMap(manifestFiles)) {
    const text = readOrRefuse(file, (f) => readFileSync(f, 'utf8'))
    const skip = skipReason(text)
    if (skip !== undefined) {
      out.skipped.push({ file, reason: skip })
      continue
    }
    const parsed = parseManifests(text, file)
    for (const crd of parsed.crds) {
      const twice = out.crds.find((c) => c.name === crd.name)
      if (twice) throw new ConfigError(`--manifests: CustomResourceDefinition ${crd.name} is in ${twice.file} and in ${crd.file}`)
      out.crds.push(crd)
    }
    out.resources.push(...parsed.resources)
  }
  if (out.crds.length === 0 && !(resourcesEnough && out.resources.length > 0))
    throw new ConfigError(
      `--manifests: no CustomResourceDefinition in ${paths.join(', ')}${resourcesEnough ? ', and no other resource' : ' (with --drop VERSION, custom resources alone are checked)'}`,
    )
  return out
}
