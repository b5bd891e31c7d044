import t from 'tap'
import { proxyFromEnvironment, type ProxyEnvironment } from '../../src/kube/proxy-env.js'

const P = 'http://proxy.corp:3128/'

// Cases from Go's golang.org/x/net/http/httpproxy (what client-go uses), on our servers.
const cases: Array<[string, ProxyEnvironment, string, string | undefined]> = [
  ['nothing set', {}, 'https://api.example.com:6443', undefined],
  ['HTTPS_PROXY for an https server', { HTTPS_PROXY: P }, 'https://api.example.com:6443', P],
  ['https_proxy, lower case', { https_proxy: P }, 'https://api.example.com', P],
  ['upper case wins', { HTTPS_PROXY: P, https_proxy: 'http://other:1' }, 'https://api.example.com', P],
  ['an empty upper case is unset', { HTTPS_PROXY: '', https_proxy: P }, 'https://api.example.com', P],
  ['HTTP_PROXY is not used for https', { HTTP_PROXY: P }, 'https://api.example.com', undefined],
  ['HTTP_PROXY for an http server', { HTTP_PROXY: P }, 'http://api.example.com:8080', P],
  ['no scheme: an http proxy', { HTTPS_PROXY: 'proxy.corp:3128' }, 'https://api.example.com', P],
  ['an https proxy', { HTTPS_PROXY: 'https://proxy.corp:3129' }, 'https://api.example.com', 'https://proxy.corp:3129/'],
  ['localhost is never proxied', { HTTPS_PROXY: P }, 'https://localhost:6443', undefined],
  ['127.0.0.0/8 is never proxied', { HTTPS_PROXY: P }, 'https://127.3.2.1:6443', undefined],
  ['::1 is never proxied', { HTTPS_PROXY: P }, 'https://[::1]:6443', undefined],
  ['NO_PROXY *', { HTTPS_PROXY: P, NO_PROXY: '*' }, 'https://api.example.com', undefined],
  ['no_proxy, lower case', { HTTPS_PROXY: P, no_proxy: 'example.com' }, 'https://api.example.com', undefined],
  ['a domain covers itself', { HTTPS_PROXY: P, NO_PROXY: 'example.com' }, 'https://example.com', undefined],
  ['a domain covers its subdomains', { HTTPS_PROXY: P, NO_PROXY: 'other.org, example.com' }, 'https://api.example.com', undefined],
  ['no partial labels', { HTTPS_PROXY: P, NO_PROXY: 'ample.com' }, 'https://api.example.com', P],
  ['.domain: subdomains only', { HTTPS_PROXY: P, NO_PROXY: '.example.com' }, 'https://example.com', P],
  ['.domain covers a subdomain', { HTTPS_PROXY: P, NO_PROXY: '.example.com' }, 'https://a.example.com', undefined],
  ['*.domain: subdomains only', { HTTPS_PROXY: P, NO_PROXY: '*.example.com' }, 'https://example.com', P],
  ['*.domain covers a subdomain', { HTTPS_PROXY: P, NO_PROXY: '*.example.com' }, 'https://a.example.com', undefined],
  ['case does not matter', { HTTPS_PROXY: P, NO_PROXY: 'API.Example.COM' }, 'https://api.example.com', undefined],
  ['a domain with the port', { HTTPS_PROXY: P, NO_PROXY: 'example.com:6443' }, 'https://api.example.com:6443', undefined],
  ['a domain with another port', { HTTPS_PROXY: P, NO_PROXY: 'example.com:443' }, 'https://api.example.com:6443', P],
  ['the default port counts', { HTTPS_PROXY: P, NO_PROXY: 'example.com:443' }, 'https://api.example.com', undefined],
  ['the Service CIDR', { HTTPS_PROXY: P, NO_PROXY: '10.96.0.0/12' }, 'https://10.96.0.1', undefined],
  ['outside the CIDR', { HTTPS_PROXY: P, NO_PROXY: '10.96.0.0/12' }, 'https://10.112.0.1', P],
  ['an IP', { HTTPS_PROXY: P, NO_PROXY: '192.0.2.10' }, 'https://192.0.2.10:6443', undefined],
  ['an IP with the port', { HTTPS_PROXY: P, NO_PROXY: '192.0.2.10:6443' }, 'https://192.0.2.10:6443', undefined],
  ['an IP with another port', { HTTPS_PROXY: P, NO_PROXY: '192.0.2.10:443' }, 'https://192.0.2.10:6443', P],
  ['another IP', { HTTPS_PROXY: P, NO_PROXY: '192.0.2.11' }, 'https://192.0.2.10', P],
  ['an IPv6 CIDR', { HTTPS_PROXY: P, NO_PROXY: 'fd00::/8' }, 'https://[fd00::1]:6443', undefined],
  ['a bracketed IPv6 with port', { HTTPS_PROXY: P, NO_PROXY: '[fd00::1]:6443' }, 'https://[fd00::1]:6443', undefined],
  ['a bare IPv6', { HTTPS_PROXY: P, NO_PROXY: 'fd00::1' }, 'https://[fd00::1]', undefined],
  ['a domain never covers an IP', { HTTPS_PROXY: P, NO_PROXY: '0.2.10' }, 'https://192.0.2.10', P],
  ['an IP never covers a name', { HTTPS_PROXY: P, NO_PROXY: '10.0.0.0/8,10.0.0.1' }, 'https://api.example.com', P],
  ['junk entries are skipped', { HTTPS_PROXY: P, NO_PROXY: ' , :443, 10.0.0.0/99, example.com' }, 'https://api.example.com', undefined],
]

t.test('proxyFromEnvironment: Go http.ProxyFromEnvironment semantics', async (t) => {
  for (const [name, env, server, want] of cases) t.equal(proxyFromEnvironment(new URL(server), env)?.href, want, name)
})

t.test('proxyFromEnvironment: a proxy it cannot use is a clear error', async (t) => {
  t.throws(() => proxyFromEnvironment(new URL('https://api.example.com'), { HTTPS_PROXY: 'socks5://proxy.corp:1080' }), {
    code: 'CRDM_KUBECONFIG',
    message: /HTTPS_PROXY "socks5:\/\/proxy\.corp:1080": only http:\/\/ and https:\/\/ proxies are supported/,
  })
  t.throws(() => proxyFromEnvironment(new URL('https://api.example.com'), { https_proxy: 'http://[bad' }), {
    code: 'CRDM_KUBECONFIG',
    message: /https_proxy "http:\/\/\[bad" is not a proxy URL/,
  })
  t.throws(() => proxyFromEnvironment(new URL('https://api.example.com'), { HTTPS_PROXY: 'ftp://proxy.corp' }), {
    message: /HTTPS_PROXY "ftp:\/\/proxy\.corp" is not a proxy URL/,
  })
  t.equal(
    proxyFromEnvironment(new URL('https://localhost'), { HTTPS_PROXY: 'socks5://proxy.corp:1080' }),
    undefined,
    'a proxy the server does not use is not judged',
  )
})
