/** What RBAC sees in a request, as kube-apiserver's RequestInfo: a 403 then says what is missing in a Role rule's terms. */

export interface RequestAttributes {
  verb: string
  /** Undefined for a non-resource path (/version, /apis, /openapi/v3): RBAC's nonResourceURLs. */
  resource?: string
  /** `''` for the core group. */
  group?: string
  subresource?: string
  namespace?: string
  name?: string
  /** The path itself, for non-resource requests. */
  path: string
}

/** Subresources of a namespace that are not namespaced resources (`/api/v1/namespaces/x/status`). */
const NAMESPACE_SUBRESOURCES = new Set(['status', 'finalize'])

/** RBAC's verb for each method: on one named object, and on a collection (GET of a collection with watch: `watch`). */
const VERBS: Readonly<Record<string, readonly [one: string, collection: string]>> = {
  GET: ['get', 'list'],
  DELETE: ['delete', 'deletecollection'],
  POST: ['create', 'create'],
  PUT: ['update', 'update'],
  PATCH: ['patch', 'patch'],
}

/** The attributes of `method path?query`; `path` without the server's own prefix. */
export function requestAttributes(
  method: string,
  path: string,
  query?: Readonly<Record<string, string | number | boolean | undefined>>,
): RequestAttributes {
  const parts = path.split('/').filter((p) => p !== '')
  let rest: string[]
  let group: string
  if (parts[0] === 'api' && parts.length >= 3) {
    group = ''
    rest = parts.slice(2)
  } else if (parts[0] === 'apis' && parts.length >= 4) {
    group = parts[1]!
    rest = parts.slice(3)
  } else {
    return { verb: method.toLowerCase(), path }
  }
  let namespace: string | undefined
  if (rest[0] === 'namespaces' && rest.length >= 2) {
    namespace = rest[1]
    if (rest.length > 2 && !NAMESPACE_SUBRESOURCES.has(rest[2]!)) rest = rest.slice(2)
  }
  const [resource, name, subresource] = rest.map((p) => decodeURIComponent(p))
  const watch = query?.['watch'] === true || query?.['watch'] === 1 || query?.['watch'] === 'true' || query?.['watch'] === '1'
  const [one, collection] = VERBS[method] ?? [method.toLowerCase(), method.toLowerCase()]
  const verb = name !== undefined ? one : method === 'GET' && watch ? 'watch' : collection
  return {
    verb,
    group,
    path,
    ...(resource !== undefined ? { resource } : {}),
    ...(subresource !== undefined ? { subresource } : {}),
    // A namespace itself is cluster-scoped: /api/v1/namespaces/x names it, it is not "in" it.
    ...(namespace !== undefined && resource !== 'namespaces' ? { namespace } : {}),
    ...(name !== undefined ? { name } : {}),
  }
}

/** `verb "list" on "customresourcedefinitions" in API group "apiextensions.k8s.io", cluster-wide`: a Role rule's terms. */
export function describeAttributes(a: RequestAttributes): string {
  if (a.resource === undefined) return `verb "${a.verb}" on the non-resource URL "${a.path}"`
  const resource = a.subresource ? `${a.resource}/${a.subresource}` : a.resource
  const scope = a.namespace !== undefined ? `in namespace "${a.namespace}"` : 'cluster-wide'
  return `verb "${a.verb}" on "${resource}" in API group "${a.group ?? ''}"${a.name !== undefined ? ` (name "${a.name}")` : ''}, ${scope}`
}
