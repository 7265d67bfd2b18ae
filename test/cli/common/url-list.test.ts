import { afterEach, describe, expect, it } from 'vitest';
import { CliError } from '../../../src/cli/common/output.js';
import { resolveUrlWithSource } from '../../../src/cli/common/settings.js';
import { parseUrlList } from '../../../src/cli/common/url-list.js';
import { tempDir } from '../../helpers/mesh.js';

describe('orchestrator URL lists (--url, --join, GPUMESH_URL)', () => {
  it('takes one URL, or several comma-separated, in order', () => {
    expect(parseUrlList('http://nas:7070', '--url')).toEqual(['http://nas:7070']);
    expect(parseUrlList('http://nas1:8080,https://nas2:8443', '--join')).toEqual(['http://nas1:8080', 'https://nas2:8443']);
    // Spaces around commas, a trailing slash, a trailing comma and a URL named twice are forgiven.
    expect(parseUrlList(' http://a:1/ , http://b:2,http://a:1,', '--url')).toEqual(['http://a:1', 'http://b:2']);
  });

  it('refuses a list with a bad URL, naming it, the list and the option', () => {
    const error = (() => {
      try {
        parseUrlList('http://nas1:8080,nas2:8080', '--join');
      } catch (caught) {
        return caught as CliError;
      }
      throw new Error('no error');
    })();
    expect(error).toBeInstanceOf(CliError);
    expect(error.message).toContain('--join');
    expect(error.message).toContain('"nas2:8080"');
    expect(error.message).toContain('http://nas1:8080,nas2:8080');
    expect(() => parseUrlList('http://a:1,not a url', '--url')).toThrow(/--url: "not a url" is not a URL \(in the list/);
    expect(() => parseUrlList('ftp://a:1', 'GPUMESH_URL')).toThrow(/GPUMESH_URL: "ftp:\/\/a:1" is not an http:\/\/ or https:\/\/ URL/);
    expect(() => parseUrlList('', '--url')).toThrow(/--url: no orchestrator URL given/);
    expect(() => parseUrlList(' , ', '--url')).toThrow(/--url: no orchestrator URL given/);
  });

  describe('where a command finds them', () => {
    const saved = process.env.GPUMESH_URL;
    afterEach(() => {
      if (saved === undefined) delete process.env.GPUMESH_URL;
      else process.env.GPUMESH_URL = saved;
    });

    it('--url first, then GPUMESH_URL, each a list; a bad one in GPUMESH_URL is named as that', () => {
      process.env.GPUMESH_URL = 'http://env1:7070,http://env2:7070';
      expect(resolveUrlWithSource({ url: 'http://flag:7070', data: tempDir() })).toEqual({ urls: ['http://flag:7070'], source: '--url' });
      expect(resolveUrlWithSource({ data: tempDir() })).toEqual({ urls: ['http://env1:7070', 'http://env2:7070'], source: 'GPUMESH_URL' });
      expect(resolveUrlWithSource({ url: 'http://a:1,http://b:2', data: tempDir() }, '--join')).toEqual({ urls: ['http://a:1', 'http://b:2'], source: '--join' });
      expect(() => resolveUrlWithSource({ url: 'http://a:1,b', data: tempDir() }, '--join')).toThrow(/^--join: "b" is not a URL/);
      process.env.GPUMESH_URL = 'http://env1:7070,:7070';
      expect(() => resolveUrlWithSource({ data: tempDir() })).toThrow(/^GPUMESH_URL: ":7070" is not a URL/);
    });
  });
});
