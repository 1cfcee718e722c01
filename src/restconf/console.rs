//! The operator web console (issue 21): a few static files, embedded in the binary, served
//! under `/console/` on the RESTCONF listener. They hold no data, so they need no
//! credentials; the page reads and acts only through the RESTCONF API with the user's own
//! credentials (and so through the same authentication, datastores and NACM), and follows
//! the agent live through RFC 8650 subscriptions. See docs/console.md.

use hyper::header::HeaderValue;
use hyper::{Method, Response, StatusCode};

use super::body::RcBody;
use super::Reply;

/// The console's files: name under `/console/`, media type, content.
const ASSETS: &[(&str, &str, &str)] = &[
    ("index.html", "text/html; charset=utf-8", include_str!("../../console/index.html")),
    ("app.css", "text/css; charset=utf-8", include_str!("../../console/app.css")),
    ("chart.js", "text/javascript; charset=utf-8", include_str!("../../console/chart.js")),
    ("app.js", "text/javascript; charset=utf-8", include_str!("../../console/app.js")),
];

/// Only our own files and our own API: no inline script or style, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; connect-src 'self'; img-src 'self' data:; \
     style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'none'; base-uri 'none'";

/// The asset a path names (`/console/` is the index), if any.
fn asset(path: &str) -> Option<&'static (&'static str, &'static str, &'static str)> {
    let name = path.strip_prefix("/console/")?;
    let name = if name.is_empty() { "index.html" } else { name };
    ASSETS.iter().find(|(n, _, _)| *n == name)
}

/// Answers a request for `/console` or `/console/...`: GET and HEAD only.
pub fn serve(method: &Method, path: &str) -> Reply {
    if method != Method::GET && method != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, method, "the console is read with GET or HEAD\n");
        r.headers_mut().insert("allow", HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    if path == "/console" {
        // Relative asset URLs in the page resolve under /console/.
        let mut r = plain(StatusCode::MOVED_PERMANENTLY, method, "moved to /console/\n");
        r.headers_mut().insert("location", HeaderValue::from_static("/console/"));
        return r;
    }
    let Some((_, content_type, text)) = asset(path) else {
        return plain(StatusCode::NOT_FOUND, method, "no such console file\n");
    };
    let mut r = Response::new(if method == Method::HEAD { RcBody::empty() } else { RcBody::text(*text) });
    let h = r.headers_mut();
    h.insert("content-type", HeaderValue::from_static(content_type));
    h.insert("content-length", HeaderValue::from(text.len()));
    secure(r)
}

/// A short text answer (redirect, 404, 405).
fn plain(status: StatusCode, method: &Method, text: &'static str) -> Reply {
    let mut r = Response::new(if method == Method::HEAD { RcBody::empty() } else { RcBody::text(text) });
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert("content-type", HeaderValue::from_static("text/plain; charset=utf-8"));
    h.insert("content-length", HeaderValue::from(text.len()));
    secure(r)
}

/// The headers every console answer carries.
fn secure(mut r: Reply) -> Reply {
    let h = r.headers_mut();
    h.insert("content-security-policy", HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert("cache-control", HeaderValue::from_static("no-cache"));
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn header<'a>(r: &'a Reply, name: &str) -> Option<&'a str> {
        r.headers().get(name).and_then(|v| v.to_str().ok())
    }

    async fn body(r: Reply) -> String {
        String::from_utf8(r.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn issue21_every_asset_is_served_with_its_type_and_the_security_headers() {
        for (name, ty, text) in ASSETS {
            let r = serve(&Method::GET, &format!("/console/{name}"));
            assert_eq!(r.status(), 200, "{name}");
            assert_eq!(header(&r, "content-type"), Some(*ty), "{name}");
            assert_eq!(header(&r, "content-length"), Some(text.len().to_string().as_str()));
            assert_eq!(header(&r, "content-security-policy"), Some(CONTENT_SECURITY_POLICY));
            assert_eq!(header(&r, "x-content-type-options"), Some("nosniff"));
            assert_eq!(header(&r, "cache-control"), Some("no-cache"));
            assert_eq!(header(&r, "referrer-policy"), Some("no-referrer"));
            assert_eq!(body(r).await, *text);
        }
        let index = serve(&Method::GET, "/console/");
        assert_eq!(header(&index, "content-type"), Some("text/html; charset=utf-8"));
        assert!(body(index).await.contains("<script src=\"app.js\""));
    }

    #[tokio::test]
    async fn issue21_head_has_the_headers_and_no_body() {
        let r = serve(&Method::HEAD, "/console/app.js");
        assert_eq!(r.status(), 200);
        let len: usize = header(&r, "content-length").unwrap().parse().unwrap();
        assert!(len > 1000, "{len}");
        assert!(body(r).await.is_empty());
    }

    #[tokio::test]
    async fn issue21_console_redirects_to_the_index_unknown_is_404_other_methods_405() {
        let r = serve(&Method::GET, "/console");
        assert_eq!(r.status(), 301);
        assert_eq!(header(&r, "location"), Some("/console/"));
        for path in ["/console/nosuch.js", "/console/../restconf", "/console/app.js/", "/console//app.js"] {
            let r = serve(&Method::GET, path);
            assert_eq!(r.status(), 404, "{path}");
            assert_eq!(header(&r, "content-security-policy"), Some(CONTENT_SECURITY_POLICY));
        }
        for m in [Method::POST, Method::PUT, Method::DELETE, Method::OPTIONS, Method::PATCH] {
            let r = serve(&m, "/console/");
            assert_eq!(r.status(), 405, "{m}");
            assert_eq!(header(&r, "allow"), Some("GET, HEAD"));
        }
    }

    #[test]
    fn issue21_assets_load_nothing_from_elsewhere_and_write_no_markup_from_strings() {
        for (name, _, text) in ASSETS {
            // The SVG namespace names elements; nothing is loaded from it.
            let text = text.replace("\"http://www.w3.org/2000/svg\"", "");
            for outside in ["http://", "https://", "//cdn", "@import", "url("] {
                assert!(!text.contains(outside), "{name} refers to {outside}");
            }
            for markup in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("] {
                assert!(!text.contains(markup), "{name} uses {markup}");
            }
        }
        let index = ASSETS[0].2;
        assert!(!index.contains("<style") && !index.contains(" style="), "inline style");
        assert_eq!(index.matches("<script").count(), index.matches("<script src=").count(), "inline script");
        let handler = index.match_indices(" on").any(|(i, _)| {
            let rest = &index[i + 3..];
            let word = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            word > 0 && rest[word..].starts_with('=')
        });
        assert!(!handler, "inline event handler attribute");
    }
}
