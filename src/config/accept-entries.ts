/** Consent entries (`<crd name>:<field path>`, or `<crd name>` for acceptUnchecked), parsed here below both the config schema and the lossless check. */

/** One CRD's consent entries (from config, a flag or the CRD's annotation); paths checked when parsed. */
export function acceptedFieldsFor(crdName: string, entries: readonly string[]): string[] {
  const out: string[] = []
  for (const entry of entries) {
    const at = entry.indexOf(':')
    if (entry.slice(0, at) === crdName) out.push(entry.slice(at + 1))
  }
  return out
}

/** Why a consent entry cannot be used, or undefined when it can. */
export function invalidAcceptEntry(entry: string): string | undefined {
  const at = entry.indexOf(':')
  if (at <= 0) return `"${entry}" is not <crd name>:<field path> (e.g. widgets.example.com:spec.token)`
  return invalidFieldPath(entry.slice(at + 1), ` in "${entry}"`)
}

/** Why a field path cannot name a checked field, or undefined when it can. */
export function invalidFieldPath(path: string, where = ''): string | undefined {
  if (!/^[A-Za-z_$][\w$-]*(\.[A-Za-z_$][\w$-]*|\[(\*|\d+|"(?:[^"\\]|\\.)*")\])*$/.test(path))
    return `"${path}"${where} is not a field path (e.g. spec.token, spec.items[*].name, metadata.labels["app.kubernetes.io/name"])`
  const metadataField = path === 'metadata' || path.startsWith('metadata.') || path.startsWith('metadata[')
  if (metadataField && !/^metadata\.(labels|annotations|finalizers|ownerReferences)(?![\w$-])/.test(path))
    return `"${path}"${where}: of metadata only labels, annotations, finalizers and ownerReferences are checked`
  return undefined
}

/**
 * A comma-separated list, as a flag, an environment variable or an annotation gives it:
 * commas inside double quotes stay (`metadata.labels["a,b"]`), items trimmed, empty ones dropped.
 */
export function splitList(raw: string): string[] {
  return (raw.match(/(?:[^,"]|"(?:[^"\\]|\\.)*")+/g) ?? []).map((s) => s.trim()).filter(Boolean)
}
