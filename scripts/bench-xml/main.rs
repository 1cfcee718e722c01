//! Old vs new NETCONF message parser (scripts/bench-xml-parser.sh builds this with both).
#![allow(dead_code)]
mod limits;
mod new;
mod old;

/// CPU time of this thread in seconds: the machine is shared, wall time is not.
fn cpu() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into the valid pointer it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

fn message(entries: usize, pad: usize) -> String {
    let mut s = String::from("<rpc xmlns=\"urn:ietf:params:xml:ns:netconf:base:1.0\" message-id=\"1\"><edit-config><target><running/></target><config><cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\"><scis>");
    for i in 0..entries {
        s.push_str(&format!(
            "<sci><csci-id>10.{}.{}.{}:80</csci-id><cs-id>AR{}</cs-id><description>{}</description><expected-interval>5</expected-interval></sci>",
            i >> 16 & 255, i >> 8 & 255, i & 255, i % 9, "d".repeat(pad)
        ));
    }
    s.push_str("</scis></cats-sma></config></edit-config></rpc>");
    s
}

fn main() {
    let limits = limits::MessageLimits::default();
    for (name, src) in [("100 000-entry edit-config", message(100_000, 8)), ("64 MB edit-config", message(64 * 1024 * 1024 / 218, 80))] {
        let el = src.matches('<').count() / 2;
        println!("{name}: {} bytes, {el} elements", src.len());
        let (mut t_old, mut t_new) = (f64::MAX, f64::MAX);
        for _ in 0..15 {
            let s = cpu();
            let root = old::parse(&src).unwrap();
            let n_old = root.children[0].children[1].children_text(&src).len();
            drop(root);
            t_old = t_old.min(cpu() - s);
            let s = cpu();
            let root = new::parse_with(&src, &limits).unwrap();
            let n_new = root.children[0].children[1].children_text(&src).unwrap().len();
            drop(root);
            t_new = t_new.min(cpu() - s);
            assert_eq!(n_old, n_new);
        }
        println!("  parse + config text + drop, CPU time, best of 15: old {t_old:.3} s, new {t_new:.3} s (new/old {:.2})", t_new / t_old);
    }
}
