import { TLS_CA_PATH } from '../../tls-client/index.js';

/** What the one line that joins a host is made of. */
export interface JoinLineParts {
  /** The orchestrator as the host reaches it. */
  url: string;
  /** The agent join grant. */
  grant: string;
  /** The hex SHA-256 of the package the orchestrator serves (`GET /install`). */
  sha256: string;
  /** The CA the grant pins (`sha256:<hex>`) on a TLS mesh, else null. */
  tlsCa: string | null;
}

/**
 * The first half of every join line, before gpumesh is there to do it: fetch the package and keep it only if its
 * SHA-256 is the digest the line names — the digest in the line is the root of trust, so whatever the URL serves (a
 * tampered package, a proxy's rewrite) is never installed or run, and the grant later in the line is never handed to
 * it. On a TLS mesh it first fetches the CA certificate trusting nothing and accepts it only if its SHA-256 (of the DER
 * bytes) is the fingerprint the line names — the check `ServerTrust` makes for the agent and the CLI — then fetches the
 * package trusting that CA alone. Plain CommonJS for `node -e`, written to survive a POSIX shell's double quotes: no
 * `"`, `$`, backtick or `!` (bash's history expansion). Arguments: the URL, the package's hex digest, and on a TLS mesh
 * the CA fingerprint.
 */
const FETCH_CHECKED_SCRIPT = [
  'const[u,h,p]=process.argv.slice(1),c=require(\'crypto\'),n=\'gpumesh-\'+h+\'.tgz\',',
  'x=m=>{console.error(\'gpumesh: \'+m);process.exit(2)},',
  'g=(a,o,f)=>require(u.slice(0,6)==\'https:\'?\'https\':\'http\').get(u+a,o,r=>{const b=[];r.on(\'data\',d=>b.push(d)).on(\'end\',()=>f(Buffer.concat(b),r.statusCode))})',
  '.on(\'error\',e=>x(\'cannot fetch \'+u+a+\': \'+e.message)),',
  'k=o=>g(\'/install/sha256/\'+h+\'/gpumesh.tgz\',o,(t,s)=>c.createHash(\'sha256\').update(t).digest(\'hex\')==h',
  '?require(\'fs\').writeFileSync(n,t):x(\'the package at \'+u+\' is not the one the join line names (HTTP \'+s+\', \'+t.length+\' bytes hashing to \'',
  '+c.createHash(\'sha256\').update(t).digest(\'hex\')+\', not \'+h+\'). Nothing was installed or run; no grant was sent.\'));',
  `p?g('${TLS_CA_PATH}',{rejectUnauthorized:false},b=>{let f='';`,
  'try{f=\'sha256:\'+c.createHash(\'sha256\').update(new c.X509Certificate(b).raw).digest(\'hex\')}catch(e){}',
  'if(f==p)k({ca:b});',
  'else x(\'TLS CA mismatch at \'+u+\': the server CA is \'+(f||\'unreadable\')+\', but the join line pins \'+p+\'. Refusing to connect; no grant was sent.\')}):k({})',
].join('');

/**
 * The line `gpumesh grant create --agent` prints: it installs this orchestrator's own package with npx (which comes
 * with Node) and starts the agent from it, so a machine with only Node joins — no clone, no registry release.
 *
 * - The package URL and the file npx installs name its digest (`/install/sha256/<hex>/gpumesh.tgz`,
 *   `./gpumesh-<hex>.tgz`): npx keeps what it installed by the spec it was given, so a fixed name would run the first
 *   build it ever fetched after the orchestrator was upgraded; a name per build installs each build once, and the
 *   orchestrator refuses (410) a build it no longer serves.
 * - `--ignore-scripts`: an agent needs none of its dependencies' install scripts, and one of them must not run.
 *   Under npx the package's own `allowScripts` does not apply (npm reads the policy of the project it installs
 *   into, here npx's cache folder), so every script would run: onnxruntime-node's downloads CUDA binaries from
 *   NuGet (hundreds of MB), better-sqlite3's fetches or compiles the SQLite binding, which only the orchestrator's
 *   store loads (the agent never opens a database; the module itself imports without its binding), protobufjs's
 *   prints a notice, and @ffmpeg-installer's `chmod u+x` does what the tarball's file modes already did.
 * - The digest is checked before npm sees anything (FETCH_CHECKED_SCRIPT): npx checks no digest of a URL it installs
 *   (an `https://…tgz` spec has no integrity to hold it to), so a line that handed npx the URL would install and run
 *   whatever the server sent, with the grant in its argv. Node fetches the package first, keeps it only if it hashes to
 *   the digest in the line, and npx installs that file.
 * - TLS: npm cannot pin a CA either (its `ca`/`cafile` settings replace the CAs it trusts for the registry too, and a
 *   `cafile` set on the machine makes it ignore NODE_EXTRA_CA_CERTS), so the same script fetches the package pinned
 *   to the CA the grant names; the agent then pins that CA from its grant as on any other call.
 */
export function joinLine(parts: JoinLineParts): string {
  const url = parts.url.replace(/\/+$/, '');
  const pin = parts.tlsCa ? ` ${parts.tlsCa}` : '';
  return `node -e "${FETCH_CHECKED_SCRIPT}" ${url} ${parts.sha256}${pin} && npx --yes --ignore-scripts ./gpumesh-${parts.sha256}.tgz agent --join ${url} --grant ${parts.grant}`;
}

/**
 * The line for a host where the `gpumesh` command is installed (`npm install --global`, `npm link` in a checkout; in
 * a checkout itself, `npx gpumesh …`). Not `npx gpumesh` in general: where gpumesh is not installed, npx would look
 * the name up in the npm registry and run whatever package bears it.
 */
export function installedJoinLine(parts: Pick<JoinLineParts, 'url' | 'grant'>): string {
  return `gpumesh agent --join ${parts.url.replace(/\/+$/, '')} --grant ${parts.grant}`;
}
